# tap.sh: what the shell tests share (sourced from tests/, where prove runs
# them): check "description" command... runs the command and prints a TAP
# line, with the command's output under a failure; skip "why" counts a skip.
n=0; fails=0
check() {
  n=$((n + 1)); desc=$1; shift
  if out=$("$@" 2>&1); then echo "ok $n - $desc"; else
    echo "not ok $n - $desc"; echo "$out" | sed 's/^/#   /'; fails=$((fails + 1)); fi
}
skip() { n=$((n + 1)); echo "ok $n - # SKIP $1"; }
