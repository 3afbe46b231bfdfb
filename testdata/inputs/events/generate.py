# Generates testdata/inputs/events/events-{0,1}.jsonl (checkpoint tests).
# Each file's timestamps rise (jitter < 10 ms); ~12% of rows are redelivered
# copies of a recent row of the same file, ~3% copies of a row of the other
# file at about the same time. Copies are byte-identical, so which copy dedup
# keeps cannot change the output.
import random
rng = random.Random(20240607)
base = 1_700_000_000_000
rows = [[], []]
for f in range(2):
    for i in range(1000):
        ts = base + i * 10 + rng.randrange(10)
        rows[f].append('{"id":"e%d%04d","user":"u%d","amount":%d,"ts":%d}' % (f, i, rng.randrange(10), rng.randrange(1, 500), ts))
for f in range(2):
    with open(f'events-{f}.jsonl', 'w') as fh:
        for i, row in enumerate(rows[f]):
            fh.write(row + '\n')
            r = rng.random()
            if r < 0.12:
                fh.write(rng.choice(rows[f][max(0, i - 5):i + 1]) + '\n')
            elif r < 0.15:
                fh.write(rows[1 - f][max(0, i - rng.randrange(5))] + '\n')
