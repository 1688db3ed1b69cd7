#!/usr/bin/env python3
"""Writes the two example datasets of the data-defined tasks (README "Your own data"):

  data/sentiment/{train,valid,test}.jsonl  sequence_classification: a "review" of words; label
      positive / negative / neutral by whether positive or negative words are more frequent.
  data/shift/{train,valid,test}.jsonl      token_classification: every position's label is the
      previous token ("<s>" at the first): shift-by-one, a seq2seq task written as tagging.

Deterministic (random.Random(seed)); run from the repository root: python3 scripts/data/make_example_data.py
Training lengths stop at 16, validation and test go to 24, so the unseen-length group is non-empty.
"""
import json
import random

POSITIVE = ["good", "great", "fine", "happy", "love", "nice", "superb", "fun"]
NEGATIVE = ["bad", "awful", "poor", "sad", "hate", "dull", "boring", "weak"]
NEUTRAL = ["the", "a", "film", "plot", "was", "and", "it", "very", "actor", "story", "music", "really"]
COLORS = ["red", "green", "blue", "cyan", "pink", "gray", "gold", "teal"]


def sentiment(rng, length):
    polar = rng.randint(1, min(4, length))
    words = [rng.choice(NEUTRAL) for _ in range(length - polar)]
    positive = 0
    for _ in range(polar):
        if rng.random() < 0.5:
            words.append(rng.choice(POSITIVE))
            positive += 1
        else:
            words.append(rng.choice(NEGATIVE))
    rng.shuffle(words)
    negative = polar - positive
    label = "positive" if positive > negative else "negative" if negative > positive else "neutral"
    return {"tokens": " ".join(words), "label": label}


def shift(rng, length):
    words = [rng.choice(COLORS) for _ in range(length)]
    return {"tokens": " ".join(words), "targets": " ".join(["<s>"] + words[:-1])}


def write(path, examples):
    with open(path, "w") as out:
        for example in examples:
            out.write(json.dumps(example) + "\n")


def main():
    for name, make, min_len in (("sentiment", sentiment, 2), ("shift", shift, 1)):
        for split, count, max_len, seed in (("train", 2000, 16, 1), ("valid", 500, 24, 2), ("test", 500, 24, 3)):
            rng = random.Random(f"{name}-{split}-{seed}")
            write(f"data/{name}/{split}.jsonl", [make(rng, rng.randint(min_len, max_len)) for _ in range(count)])


if __name__ == "__main__":
    main()
