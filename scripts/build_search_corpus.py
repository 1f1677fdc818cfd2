"""Builds demo/product/tasks/chat/corpus.json, the chat tasks' search corpus: one made-up fact per document.

    .venv/bin/python scripts/build_search_corpus.py     # rewrites corpus.json (deterministic)

The facts are invented (names built from syllables), so the model cannot answer from what it learned in
pretraining: it has to read the retrieved documents. Each document carries the question it answers and the
answer's short form, which the search and orchestrator tasks check for.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

CORPUS_FILE = Path(__file__).resolve().parents[1] / "demo" / "product" / "tasks" / "chat" / "corpus.json"
PER_RELATION = 60
SYLLABLES = ("ka", "lo", "mir", "ten", "va", "dor", "sel", "bru", "na", "quin", "ros", "fal", "em", "tor", "zin", "pel")
FIRST_NAMES = ("Ada", "Boris", "Clara", "Dmitri", "Elena", "Farid", "Greta", "Hugo", "Ines", "Jonas", "Katya", "Luis",
               "Mara", "Nils", "Olga", "Pavel", "Rosa", "Soren", "Tilda", "Umar")
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")
PRODUCTS = ("glass bottles", "wooden toys", "copper pipes", "wool blankets", "paper lamps", "steel bolts",
            "clay bricks", "silk scarves", "leather boots", "tin cans", "rope ladders", "sail cloth")
FRUITS = ("plum", "pear", "cherry", "apple", "melon", "fig", "apricot", "quince")


def build(seed: int = 20261202) -> list[dict]:
    rng = random.Random(seed)
    used: set[str] = set()

    def name() -> str:
        while True:
            word = "".join(rng.choice(SYLLABLES) for _ in range(rng.choice((2, 3)))).capitalize()
            if word not in used and len(word) >= 4:
                used.add(word)
                return word

    def person() -> str:
        return f"{rng.choice(FIRST_NAMES)} {name()}"

    facts = []
    for _ in range(PER_RELATION):
        town, year = name(), str(rng.randrange(1600, 1950))
        facts.append((f"The town of {town} was founded in {year}.", f"In which year was {town} founded?", year))
        bridge, designer = name(), person()
        facts.append((f"The {bridge} bridge was designed by {designer}.", f"Who designed the {bridge} bridge?",
                      designer))
        who, place = person(), name()
        facts.append((f"{who} was born in the town of {place}.", f"Where was {who} born?", place))
        fruit, host, month = rng.choice(FRUITS), name(), rng.choice(MONTHS)
        facts.append((f"The {fruit} festival of {host} is held every year in {month}.",
                      f"In which month is the {fruit} festival of {host} held?", month))
        company, product = name(), rng.choice(PRODUCTS)
        facts.append((f"The {company} company makes {product}.", f"What does the {company} company make?", product))
        mountain, height = name(), str(rng.randrange(900, 4800))
        facts.append((f"Mount {mountain} is {height} metres high.", f"How high is Mount {mountain}?", height))
    rng.shuffle(facts)
    return [{"id": f"D{i:03d}", "text": text, "question": question, "answer": answer}
            for i, (text, question, answer) in enumerate(facts)]


if __name__ == "__main__":
    CORPUS_FILE.write_text("[\n" + ",\n".join(json.dumps(doc) for doc in build()) + "\n]\n")  # a document a line
    print(f"wrote {CORPUS_FILE}")
