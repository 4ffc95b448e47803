-- Image classification on Fashion-MNIST (28x28 grey images, 10 classes): an MLP
-- or a small CNN (two blocks of Conv2d 3x3, BatchNorm2d, ReLU, MaxPool2d 2),
-- trained with the Engine (--zero-stage, `zorch launch -n 2`). Prints the mean
-- train loss and the test accuracy each epoch, a confusion matrix at the end,
-- and saves the state dict (PyTorch's names) as safetensors.
-- Run: build/zorch models/fashion_mnist.lua --model cnn --epochs 5 [--augment] [--help]
-- models/fashion_mnist_torch.py builds the same models in PyTorch: it starts
-- from --save-init's weights and reads the same batches (it derives the
-- shuffle order from --seed as data.DataLoader does), and --train trains them.
local zorch = require "zorch"
local nn, optim, data = zorch.nn, zorch.optim, zorch.data

local opt = zorch.flags(arg, {
  model = {"mlp", "the network", choices = {"mlp", "cnn"}},
  epochs = {5, "number of epochs"},
  ["batch-size"] = {128, "images per batch (per rank)"},
  lr = {0.001, "learning rate (of the first epoch)"},
  schedule = {"cosine", "the learning rate per epoch: cosine (from lr down towards 0 over the epochs) or constant",
              choices = {"cosine", "constant"}},
  optimizer = {"adam", "the optimizer", choices = {"adam", "sgd"}},
  momentum = {0.9, "SGD momentum"},
  ["weight-decay"] = {0.0, "L2 weight decay"},
  dropout = {0.0, "dropout before the CNN's last layer (0: none)"},
  seed = {0, "random seed for the weights, the shuffle and the augmentation"},
  augment = {false, "random crops (padding 2) and horizontal flips of the training images"},
  shuffle = {true, "shuffle the training set each epoch (--no-shuffle keeps the file's order)"},
  limit = {0, "train on the first N training images only (0: all 60000)"},
  ["test-limit"] = {0, "test on the first N test images only (0: all 10000)"},
  data = {"/usr/share/datasets/fashion-mnist", "folder of the IDX files (train-images-idx3-ubyte.gz, ...)"},
  ["zero-stage"] = {0, "ZeRO stage (0-3)"},
  device = {"cpu", "cpu, cuda (each rank its own GPU) or cuda:N"},
  save = {"fashion_mnist.safetensors", "where to save the final state dict ('' : not saved)"},
  ["save-init"] = {"", "save the initial state dict here (for models/fashion_mnist_torch.py)"},
  ["print-steps"] = {0, "print the loss of each of the first N optimizer steps"},
  log = {"", "write metrics here as JSON lines (loss each step; epoch loss and test accuracy each epoch)"},
  plot = {"", "after training, draw the --log metrics: a .png, .svg or .pdf file, or 'text' for the terminal"},
  quiet = {false, "print only the final accuracy"},
  bench = {0, "time N rounds of a training step (forward, backward, optimizer step) and of inference " ..
              "(eval, no grad) on one batch, print images/s as JSON lines, and stop"},
  threads = {0, "CPU threads (0: the default)"},
}, "usage: zorch models/fashion_mnist.lua [flags]")
-- a bad output path fails now, not after the training (rank 0 writes it)
if zorch.dist.rank() == 0 then zorch.flags.check_output(opt.save, "--save") end

local CLASSES = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
                 "Ankle boot"}
-- the training set's pixel mean and standard deviation (of values / 255)
local MEAN, STD = 0.2860, 0.3530

local function load_split(prefix, limit)
  local x = data.load_idx(("%s/%s-images-idx3-ubyte.gz"):format(opt.data, prefix))
  local y = data.load_idx(("%s/%s-labels-idx1-ubyte.gz"):format(opt.data, prefix))
  if x:dim() ~= 3 or y:dim() ~= 1 or x.shape[1] ~= y.shape[1] then
    error(("fashion_mnist: %s: images %s and labels %s do not match"):format(prefix,
      table.concat(x.shape, "x"), table.concat(y.shape, "x")), 0)
  end
  if limit > 0 and limit < x.shape[1] then x, y = x:narrow(1, 1, limit), y:narrow(1, 1, limit) end
  -- uint8 (N, 1, 28, 28) images (normalised a batch at a time), 1-based int64 labels
  return x:reshape({x.shape[1], 1, x.shape[2], x.shape[3]}), y:long() + 1
end

local function build(kind)
  if kind == "mlp" then
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                         nn.Linear(128, 10))
  end
  if not nn.Conv2d then
    error("fashion_mnist: --model cnn needs nn.Conv2d and nn.MaxPool2d, which this zorch lacks", 0)
  end
  return nn.Sequential(
    nn.Conv2d(1, 32, 3, {padding = 1}), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
    nn.Conv2d(32, 64, 3, {padding = 1}), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
    nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Dropout(opt.dropout), nn.Linear(128, 10))
end

zorch.manual_seed(opt.seed)
if opt.threads > 0 then zorch.set_num_threads(opt.threads) end
local engine = zorch.Engine{zero_stage = opt["zero-stage"], device = opt.device}
local say = function(...) if not opt.quiet then engine:print(...) end end

local train_x, train_y = load_split("train", opt.limit)
local test_x, test_y = load_split("t10k", opt["test-limit"])
local normalize = {mean = MEAN * 255, std = STD * 255}
local loader = data.DataLoader(data.TensorDataset(train_x, train_y), {
  batch_size = opt["batch-size"], shuffle = opt.shuffle, seed = opt.seed, normalize = normalize,
  augment = opt.augment and {crop_padding = 2, hflip = true} or nil})
local test_loader = data.DataLoader(data.TensorDataset(test_x, test_y), {batch_size = 500, normalize = normalize})

local model = build(opt.model)
if opt["save-init"] ~= "" then engine:save(model:state_dict(), opt["save-init"]) end
local params = model:parameters()
local optimizer = opt.optimizer == "adam"
  and optim.Adam(params, {lr = opt.lr, weight_decay = opt["weight-decay"]})
  or optim.SGD(params, {lr = opt.lr, momentum = opt.momentum, weight_decay = opt["weight-decay"]})
model, loader, optimizer = engine:prepare(model, loader, optimizer)
if engine.device ~= "cpu" then test_loader.device = engine.device end
local criterion = nn.CrossEntropyLoss()

-- Accuracy over the test set and the confusion matrix (rows: true class,
-- columns: predicted), with this rank's model (every rank tests it all).
local function evaluate()
  model:eval()
  local confusion = zorch.zeros(100, {dtype = "int64"})
  local ones = zorch.ones(500, {dtype = "int64"})
  zorch.no_grad(function()
    for x, y in test_loader:iter() do
      local pred = zorch.argmax(model(x), 2):to("cpu")
      local cell = (y:to("cpu") - 1) * 10 + pred -- 1-based cell of the 10x10 matrix
      confusion = zorch.scatter_add(confusion, 1, cell, ones:narrow(1, 1, cell:numel()))
    end
  end)
  model:train()
  local m = confusion:reshape({10, 10})
  local correct = 0
  for i = 1, 10 do correct = correct + m[i][i]:item() end
  return correct / test_x.shape[1], m
end

-- ---- benchmark: the best of --bench rounds of one training step and of one inference, on the
-- first batch of the training set (models/fashion_mnist_torch.py --bench times PyTorch's the same way)
if opt.bench > 0 then
  local B = opt["batch-size"]
  local x, y = data.normalize(train_x:narrow(1, 1, B), normalize.mean, normalize.std), train_y:narrow(1, 1, B)
  if engine.device ~= "cpu" then x, y = x:to(engine.device), y:to(engine.device) end
  local best_train, best_infer = math.huge, math.huge
  for r = 0, opt.bench do
    model:train()
    local t0 = zorch.clock()
    local loss = criterion(model(x), y)
    optimizer:zero_grad()
    engine:backward(loss)
    optimizer:step()
    loss:item() -- (waits for the device)
    local t1 = zorch.clock()
    model:eval()
    zorch.no_grad(function() zorch.argmax(model(x), 2):to("cpu") end)
    local t2 = zorch.clock()
    if r > 0 then best_train, best_infer = math.min(best_train, t1 - t0), math.min(best_infer, t2 - t1) end
  end
  local name = ("fashion_mnist_%s_b%d_t%d"):format(opt.model, B, zorch.get_num_threads())
  engine:print(('{"name": "zorch/%s_train", "value": %.4g, "unit": "images/s"}'):format(name, B / best_train))
  engine:print(('{"name": "zorch/%s_infer", "value": %.4g, "unit": "images/s"}'):format(name, B / best_infer))
  return
end

local logger = opt.log ~= "" and zorch.Logger{jsonl = opt.log} or nil
local steps, t0 = 0, zorch.clock()
local accuracy, confusion
for epoch = 1, opt.epochs do
  -- constant within an epoch; the cosine schedule lowers it epoch by epoch
  if opt.schedule == "cosine" then
    optimizer.lr = opt.lr * 0.5 * (1 + math.cos(math.pi * (epoch - 1) / opt.epochs))
  end
  model:train()
  local total, n, epoch_t0 = 0, 0, zorch.clock()
  -- a bar on a terminal; in a log a line every 30 s of a long epoch
  local bar <close> = zorch.progress(#loader, {label = ("epoch %d"):format(epoch), unit = "step", every_s = 30,
                                                rank = opt.quiet and 1 or nil})
  for x, y in loader:iter() do
    local loss = criterion(model(x), y)
    optimizer:zero_grad()
    engine:backward(loss)
    optimizer:step()
    steps = steps + 1
    local l = loss:item()
    if steps <= opt["print-steps"] then engine:print(("step %d loss %.8f"):format(steps, l)) end
    if logger then logger:log(steps, {loss = l}) end
    total, n = total + l, n + 1
    bar:update(1, {loss = l})
  end
  bar:close()
  local train_loss = engine:mean(total / math.max(n, 1))
  accuracy, confusion = evaluate()
  say(("Epoch %d train loss: %.4f  test accuracy: %.2f%%  (%.1fs)"):format(epoch, train_loss, 100 * accuracy,
    zorch.clock() - epoch_t0))
  if logger then logger:log(steps, {epoch = epoch, epoch_loss = train_loss, test_accuracy = accuracy, lr = optimizer.lr}) end
end
if logger then logger:close() end

if confusion and not opt.quiet then
  local lines = {"Confusion matrix (rows: true class, columns: predicted):",
                 ("%-12s"):format("") .. (" %5d"):rep(10):format(0, 1, 2, 3, 4, 5, 6, 7, 8, 9)}
  for i = 1, 10 do
    local row = ("%d %-10s"):format(i - 1, CLASSES[i])
    for j = 1, 10 do row = row .. (" %5d"):format(confusion[i][j]:item()) end
    lines[#lines + 1] = row
  end
  say(table.concat(lines, "\n"))
end
engine:print(("done: %s, %d epochs, %d steps in %.1fs, test accuracy %.2f%%"):format(opt.model, opt.epochs, steps,
  zorch.clock() - t0, 100 * (accuracy or 0)))
if opt.save ~= "" then engine:save(model:state_dict(), opt.save) end
if opt.plot ~= "" and opt.log ~= "" and engine.rank == 0 then
  zorch.plot(opt.log, {y = {"loss", "test_accuracy"}, output = opt.plot ~= "text" and opt.plot or nil,
                       title = "Fashion-MNIST " .. opt.model})
end
