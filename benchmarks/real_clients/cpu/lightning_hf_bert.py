"""A new user's CPU Lightning fine-tune of a Hugging Face model: the LightningModule holds a random-init BERT as
``self.model`` and its training_step calls ``self.model(**batch)``, never its own forward.

Own timer: a Callback times each training batch, end to end (from one batch's end to the next's); the median of
the second half is printed as `median step X ms (own timer)`.

    python lightning_hf_bert.py [--steps 40] [--batch 16] [--seq 128] [--compile]

--compile is roofscope's fix as its text writes it here (self.model = torch.compile(self.model) in __init__).
"""
import argparse
import time

import lightning as L
import torch
from transformers import BertConfig, BertForSequenceClassification

from own_timer import report   # this folder's: the timer line plain_pairs.sh reads

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=40)
p.add_argument("--batch", type=int, default=16)
p.add_argument("--seq", type=int, default=128)
p.add_argument("--compile", action="store_true")
args = p.parse_args()
torch.manual_seed(0)


class Classifier(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.model = BertForSequenceClassification(BertConfig(
            hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024, vocab_size=8000,
            num_labels=2))
        if args.compile:
            self.model = torch.compile(self.model)

    def training_step(self, batch, i):
        ids, labels = batch
        out = self.model(input_ids=ids, labels=labels)
        self.log("loss", out.loss)
        return out.loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-4)


class Timer(L.Callback):
    def __init__(self):
        self.times, self.t = [], None

    def on_train_batch_end(self, *a):
        now = time.perf_counter()
        if self.t is not None:
            self.times.append(now - self.t)
        self.t = now


n = args.batch * args.steps
data = torch.utils.data.TensorDataset(torch.randint(0, 8000, (n, args.seq)), torch.randint(0, 2, (n,)))
timer = Timer()
trainer = L.Trainer(accelerator="cpu", devices=1, max_steps=args.steps, logger=False, enable_checkpointing=False,
                    enable_progress_bar=False, enable_model_summary=False, callbacks=[timer])
trainer.fit(Classifier(), torch.utils.data.DataLoader(data, batch_size=args.batch))
report(timer.times)
