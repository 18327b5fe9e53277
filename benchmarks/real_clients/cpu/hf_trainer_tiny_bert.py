"""A new user's CPU fine-tune: HF Trainer on a small random-init BERT, random token batches.

Own timer: a TrainerCallback times each optimizer step (wall clock between step begin and end); the median
of the second half is printed as `median step X ms (own timer)`.

    python hf_trainer_tiny_bert.py [--steps 30] [--batch 16] [--seq 128] [--compile]

--compile is roofscope's fix as its text writes it for an HF Trainer (TrainingArguments(..., torch_compile=True)),
to check its verdict in plain runs.
"""
import argparse
import statistics
import tempfile
import time

import torch
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainerCallback, TrainingArguments

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=30)
p.add_argument("--batch", type=int, default=16)
p.add_argument("--seq", type=int, default=128)
p.add_argument("--compile", action="store_true")
args = p.parse_args()

torch.manual_seed(0)
cfg = BertConfig(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024,
                 vocab_size=8000, num_labels=2)
model = BertForSequenceClassification(cfg)


class Random(torch.utils.data.Dataset):
    def __len__(self):
        return args.batch * args.steps

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return {"input_ids": torch.randint(0, cfg.vocab_size, (args.seq,), generator=g),
                "attention_mask": torch.ones(args.seq, dtype=torch.long),
                "labels": torch.randint(0, 2, (), generator=g)}


class Timer(TrainerCallback):
    def __init__(self):
        self.times, self.t = [], 0.0

    def on_step_begin(self, *a, **k):
        self.t = time.perf_counter()

    def on_step_end(self, *a, **k):
        self.times.append(time.perf_counter() - self.t)


timer = Timer()
with tempfile.TemporaryDirectory() as out:
    targs = TrainingArguments(output_dir=out, per_device_train_batch_size=args.batch, max_steps=args.steps,
                              use_cpu=True, report_to=[], logging_steps=10, save_strategy="no",
                              dataloader_num_workers=0, disable_tqdm=True, torch_compile=args.compile)
    Trainer(model=model, args=targs, train_dataset=Random(), callbacks=[timer]).train()
half = timer.times[len(timer.times) // 2:]
print(f"median step {1e3 * statistics.median(half):.2f} ms (own timer, {len(half)} steps)")
