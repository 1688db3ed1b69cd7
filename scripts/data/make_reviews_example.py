#!/usr/bin/env python3
"""Writes data/reviews/{train,valid,test}.csv: an example built like a public review dataset (a CSV
of short texts with a label column, as in Yelp or Amazon polarity), for README "Your own data" and
configs/reviews.json.

  id,text,label
  17,"Great battery, not bad at all!",positive

Reviews are written as people type them: capitals, commas and full stops, "!" and "?", fields
quoted when they hold a comma. Each review has one to four opinion words; "not" before one flips
it ("not bad" counts as positive). The label is positive / negative by the sign of the sum, mixed
when it is zero. A model that ignores the word before an opinion word gets every review with a
"not" wrong that the flip decides: per-class metrics show it. Read with task.lowercase and
task.split_punctuation, a review is at most 16 tokens in train.csv; valid.csv and test.csv go to
24, so the report's unseen-length group is non-empty.

Deterministic (random.Random(seed)); run from the repository root:
python3 scripts/data/make_reviews_example.py
"""
import csv
import io
import random

POSITIVE = ["good", "great", "excellent", "lovely", "perfect", "solid", "nice", "fantastic"]
NEGATIVE = ["bad", "awful", "poor", "terrible", "flimsy", "broken", "useless", "disappointing"]
THINGS = ["battery", "screen", "price", "case", "charger", "delivery", "sound", "camera", "fit", "quality"]
FILLER = ["the", "it", "this", "really", "very", "and", "overall", "honestly", "i", "think"]
ENDINGS = [".", "!", "?", ""]
# Product names, as real reviews have them: most occur once or twice, so task.min_count 2 reads
# them as [UNK] and the [UNK] row is trained on words the model has not seen.
_names = random.Random(7)
BRANDS = ["".join(_names.choice("bcdfghjklmnprstvz") + _names.choice("aeiou") for _ in range(3)) + str(_names.randint(1, 9))
          for _ in range(3000)]


def token_count(text):
    """Tokens after task.lowercase and task.split_punctuation: words and punctuation marks."""
    count = 0
    for word in text.split():
        pieces = 0
        current = False
        for ch in word:
            if ch.isalnum():
                if not current:
                    pieces += 1
                    current = True
            else:
                pieces += 1
                current = False
        count += pieces
    return count


def clause(rng):
    """One opinion clause and its polarity (+1 / -1)."""
    positive = rng.random() < 0.5
    word = rng.choice(POSITIVE if positive else NEGATIVE)
    polarity = 1 if positive else -1
    negated = rng.random() < 0.3
    if negated:
        polarity = -polarity
    words = [rng.choice(FILLER) for _ in range(rng.randint(0, 2))]
    words += [rng.choice(BRANDS)] if rng.random() < 0.15 else []
    words += [rng.choice(THINGS)] if rng.random() < 0.7 else []
    words += ["was"] if rng.random() < 0.5 else []
    words += (["not"] if negated else []) + [word]
    return " ".join(words), polarity


def review(rng, max_tokens):
    while True:
        clauses = [clause(rng) for _ in range(rng.randint(1, 4))]
        total = sum(p for _, p in clauses)
        text = ", ".join(c for c, _ in clauses) + rng.choice(ENDINGS)
        text = text[0].upper() + text[1:]
        if rng.random() < 0.2:
            text = text.replace(" i ", " I ")
        if token_count(text) <= max_tokens:
            label = "positive" if total > 0 else "negative" if total < 0 else "mixed"
            return text, label


def write(path, rows):
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["id", "text", "label"])
    writer.writerows(rows)
    with open(path, "w", encoding="utf-8") as f:
        f.write(out.getvalue())


def main():
    import os
    os.makedirs("data/reviews", exist_ok=True)
    rng = random.Random(20240)
    next_id = 1
    for name, count, max_tokens in [("train", 4000, 16), ("valid", 600, 24), ("test", 600, 24)]:
        rows = []
        for _ in range(count):
            text, label = review(rng, max_tokens)
            rows.append([next_id, text, label])
            next_id += 1
        write(f"data/reviews/{name}.csv", rows)


if __name__ == "__main__":
    main()
