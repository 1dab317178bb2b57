#!/usr/bin/env bash
# Seeds of the corpus-reader fuzz targets (tests/fuzz/fuzz_corpus_*.c), from files the formats'
# own tools write: text and JSON Lines (gzip / zstd made with zlib's and zstd's Python and
# command-line tools), Parquet written by pyarrow (and Hugging Face `datasets` when installed),
# Megatron-LM .idx/.bin pairs laid out as megatron/core/datasets/indexed_dataset.py writes them.
# Called by make_corpus.sh; runs alone too. pyarrow comes from $PYTHON (default: the interop
# venv, build/interop-venv/bin/python, which `make test-interop` makes); without it the Parquet
# seeds are left as they are. The seeds are committed.
#   usage: tests/fuzz/make_corpus_readers.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
c=tests/fuzz/corpus
for n in corpus_text corpus_jsonl corpus_parquet corpus_megatron; do mkdir -p "$c/$n"; done
rm -f "$c"/corpus_text/seed-* "$c"/corpus_jsonl/seed-* "$c"/corpus_megatron/seed-*
python3 - "$c" <<'PY'
import gzip, json, os, struct, sys, subprocess
c = sys.argv[1]
# The documents of tests/corpus_docs.h.
DOCS = ["The first document.\n", "Multi-line text,\n  an indented second line,\n\tand a tab.\n", "",
        "Non-ASCII: \u00e9 \u00fc \u00df \u6f22\u5b57 \U0001f642 \u2014 \u201cquotes\u201d\n",
        "JSON's own characters: \"quoted\", back\\slash, {braces} and [brackets]\n",
        "A % sign inside a line.\n%% is not a separator either.\n", "CRLF line ends\r\nstay as they are.\r\n",
        "\n\nLeading blank lines, then text.\n",
        "Science is what we understand well enough to explain to a computer.\nArt is everything else.\n",
        "The last document.\n"]
def put(name, data):
    open(os.path.join(c, name), "wb").write(data)
def zst(data):
    return subprocess.run(["zstd", "-q", "-c"], input=data, stdout=subprocess.PIPE, check=True).stdout
text = "%\n".join(DOCS).encode()
plain = "A plain file is one document.\n% not a separator\nunicode: \u00e9\u00e8\n".encode()
put("corpus_text/seed-fortunes", b"\0" + text)
put("corpus_text/seed-fortunes-gzip", b"\1" + text)
put("corpus_text/seed-plain-zstd", b"\2" + plain)
put("corpus_text/seed-raw-gzip", b"\0" + gzip.compress(text))
put("corpus_text/seed-raw-zstd", b"\0" + zst(text))
put("corpus_text/seed-latin1", b"\0" + "caf\u00e9\n%\nna\u00efve\n".encode("latin-1"))
jl = "".join(json.dumps({"id": i, "text": d, "meta": {"n": [1, 2.5, None]}}, ensure_ascii=False) + "\n"
             for i, d in enumerate(DOCS)).encode()
esc = "".join(json.dumps({"text": d}) + "\n" for d in DOCS).encode()
put("corpus_jsonl/seed-docs", b"\0" + jl)
put("corpus_jsonl/seed-docs-gzip", b"\1" + jl)
put("corpus_jsonl/seed-escaped-zstd", b"\2" + esc)
put("corpus_jsonl/seed-field-t", b"\4" + b'{"t": "short"}\n\n  \n{"t": "two\\nlines", "text": 1}\n')
put("corpus_jsonl/seed-bad-line", b"\0" + b'{"text": "ok"}\n{"text": 5}\n["text"]\n{"text": "b\n')
put("corpus_jsonl/seed-raw-gzip", b"\0" + gzip.compress(jl))
# Megatron pairs: [options][u16 index length][.idx][.bin].
def megatron(docs, code, fmt, seqs=1, modes=False):
    lens, ptrs, doc_idx, data = [], [], [0], b""
    for d in docs:
        parts = seqs if d else 0
        for p in range(parts):
            s = d[len(d) * p // parts: len(d) * (p + 1) // parts]
            lens.append(len(s)); ptrs.append(len(data)); data += struct.pack("<%d%s" % (len(s), fmt), *s)
        doc_idx.append(len(lens))
    idx = b"MMIDIDX\0\0" + struct.pack("<QBQQ", 1, code, len(lens), len(doc_idx))
    idx += struct.pack("<%di" % len(lens), *lens) + struct.pack("<%dq" % len(ptrs), *ptrs)
    idx += struct.pack("<%dq" % len(doc_idx), *doc_idx)
    if modes: idx += bytes(len(lens))
    return idx, data
def pair(name, opts, idx, data):
    put("corpus_megatron/" + name, bytes([opts]) + struct.pack("<H", len(idx)) + idx + data)
ids = [[72, 105, 257], [], [33, 10, 257], [1, 2, 3, 4, 5, 6, 7, 257]]
pair("seed-uint16-eod", 1, *megatron(ids, 8, "H"))
pair("seed-int32-two-sequences", 2, *megatron(ids, 4, "i", seqs=2))
pair("seed-int64-by-bin", 4 | 3, *megatron(ids, 5, "q"))
pair("seed-uint8-multimodal", 0, *megatron([[1, 2], [3]], 1, "B", modes=True))
pair("seed-int16-vocab300", 1, *megatron([[299, 300, 1]], 3, "h"))
pair("seed-empty", 0, *megatron([], 8, "H"))
PY
py=${PYTHON:-build/interop-venv/bin/python}
if "$py" -c 'import pyarrow' 2>/dev/null; then
  rm -f "$c"/corpus_parquet/seed-*
  "$py" - "$c/corpus_parquet" <<'PY'
import os, sys
import pyarrow as pa, pyarrow.parquet as pq
d = sys.argv[1]
DOCS = ["The first document.\n", "Multi-line\n text \u00e9 \u6f22\U0001f642\n", "", "again", "again", "again"]
t = pa.table({"text": DOCS})
for comp in ["none", "snappy", "gzip", "zstd"]:
    for dic in [True, False]:
        for v in ["1.0", "2.0"]:
            if comp != "zstd" and (dic, v) == (False, "1.0"): continue
            pq.write_table(t, os.path.join(d, "seed-%s-%s-v%s" % (comp, "dict" if dic else "plain", v[0])),
                           compression=comp, use_dictionary=dic, data_page_version=v)
big = pa.table({"id": list(range(60)), "text": ["row %d %s\n" % (i, "x" * (i % 9)) for i in range(60)],
                "tags": [["a"]] * 60})
pq.write_table(big, os.path.join(d, "seed-pages-groups"), row_group_size=25, data_page_size=64,
               write_page_checksum=True, compression="snappy")
pq.write_table(big, os.path.join(d, "seed-dict-fallback"), dictionary_pagesize_limit=64, data_page_size=128)
pq.write_table(pa.table({"text": ["a", None, "b"]}), os.path.join(d, "seed-nulls"))
pq.write_table(pa.table({"text": pa.array(DOCS, pa.large_string())}), os.path.join(d, "seed-large-string"))
pq.write_table(pa.table({"text": [[1], [2]]}), os.path.join(d, "seed-nested"))
pq.write_table(pa.table({"t": ["one", "two"]}), os.path.join(d, "seed-field-t"))
try:
    import datasets
    datasets.disable_progress_bars()
    datasets.Dataset.from_dict({"text": DOCS, "n": list(range(len(DOCS)))}).to_parquet(os.path.join(d, "seed-datasets"))
except ImportError:
    pass
PY
else
  echo "make_corpus_readers: no pyarrow in $py; Parquet seeds left as they are"
fi
for n in corpus_text corpus_jsonl corpus_parquet corpus_megatron; do echo "$n: $(ls "$c/$n" | wc -l) seeds, $(du -sk "$c/$n" | cut -f1) KiB"; done
