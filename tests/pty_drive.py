#!/usr/bin/env python3
"""Drives a program in a pseudo-terminal, as a person at a keyboard would.

Usage: pty_drive.py STEPS -- command [args...]

STEPS is a file of steps, one a line (text with Python escapes: \\n, \\t,
\\x03 for Ctrl-C, \\x1b[A for the up arrow):
  send TEXT      write TEXT to the terminal
  expect TEXT    read until TEXT appears after the last match (timeout 20 s)
  sleep SECONDS
  kill           end the program with SIGKILL
Prints `ok N` or `missing N` for the Nth expect, then `exit STATUS` and the
transcript (carriage returns and terminal escapes removed) after a `transcript:` line. A missed
expectation stops the run there."""
import os, pty, re, select, signal, sys, time

TIMEOUT = 20.0
ESCAPES = re.compile(r"\x1b(\[[0-9;?]*[A-Za-z]|[=>])")


def main():
    sep = sys.argv.index("--")
    steps = open(sys.argv[1], encoding="utf-8").read().splitlines()
    cmd = sys.argv[sep + 1:]
    pid, fd = pty.fork()
    if pid == 0:
        try:
            os.execvp(cmd[0], cmd)
        finally:
            os._exit(127)
    out = bytearray()
    cursor = 0  # where the next expect starts looking

    def read_some(wait):
        r, _, _ = select.select([fd], [], [], wait)
        if not r:
            return True
        try:
            data = os.read(fd, 65536)
        except OSError:
            return False
        if not data:
            return False
        out.extend(data)
        return True

    def text():
        return ESCAPES.sub("", out.decode("utf-8", "replace")).replace("\r", "")

    n = 0
    alive = True
    for line in steps:
        if not line.strip():
            continue
        op, _, arg = line.partition(" ")
        arg = arg.encode("latin-1", "backslashreplace").decode("unicode_escape")
        if op == "send":
            os.write(fd, arg.encode())
        elif op == "sleep":
            end = time.monotonic() + float(arg)
            while alive and time.monotonic() < end:
                alive = read_some(end - time.monotonic())
        elif op == "kill":
            os.kill(pid, signal.SIGKILL)
        elif op == "expect":
            n += 1
            end = time.monotonic() + TIMEOUT
            while True:
                at = text().find(arg, cursor)
                if at >= 0:
                    cursor = at + len(arg)
                    print(f"ok {n}")
                    break
                if not alive or time.monotonic() > end:
                    print(f"missing {n}")
                    break
                alive = read_some(min(1.0, end - time.monotonic()))
            if at < 0:
                break
        sys.stdout.flush()
    # end of input, then whatever is left
    try:
        os.write(fd, b"\x04")
    except OSError:
        pass
    end = time.monotonic() + TIMEOUT
    status = None
    while time.monotonic() < end:
        if alive:
            alive = read_some(0.5)
        else:
            time.sleep(0.05)
        done, st = os.waitpid(pid, os.WNOHANG)
        if done:
            status = st
            break
    if status is None:
        os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
    while read_some(0):
        pass
    code = os.waitstatus_to_exitcode(status)
    print(f"exit {code}")
    print("transcript:")
    sys.stdout.write(text())


if __name__ == "__main__":
    main()
