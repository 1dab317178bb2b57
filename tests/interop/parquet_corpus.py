#!/usr/bin/env python3
"""Parquet written by pyarrow and by Hugging Face `datasets`, prepared by ctitan (`make test-interop`).

One set of documents (the same as tests/corpus_docs.h and the fixtures in tests/fixtures/corpus/,
plus a larger generated set that spans many pages and row groups) is written as fortune-format
text and as Parquet in every combination pyarrow offers of
  compression        none, snappy, gzip, zstd
  dictionary         on, off (and on with a dictionary page limit small enough to fall back to
                     PLAIN part way through a column chunk)
  data page          v1, v2
and as `datasets.Dataset.to_parquet()` writes it, with the text column REQUIRED or OPTIONAL,
string or large_string, with and without page CRC-32s. `ctitan data prepare` must write the same
shards (sha256 of the output folder) from every one of them as from the text. Then files ctitan
does not read are refused in one line naming the file, with no output folder left: nulls, LZ4,
BROTLI, DELTA encodings, a nested or an integer column.

pyarrow and datasets are taken from $BUILD/interop-venv, a virtual environment this script makes
(python3 -m venv; pip install pyarrow datasets) when they do not import; when that fails (no venv
module, no network) it prints one SKIP line and exits 0. Prints PASS/FAIL lines; exits 1 when one
failed.
"""
import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile

DOCS = [
    "The first document.\n",
    "Multi-line text,\n  an indented second line,\n\tand a tab.\n",
    "",
    "Non-ASCII: \u00e9 \u00fc \u00df \u6f22\u5b57 \U0001f642 \u2014 \u201cquotes\u201d\n",
    "JSON's own characters: \"quoted\", back\\slash, {braces} and [brackets]\n",
    "A % sign inside a line.\n%% is not a separator either.\n",
    "CRLF line ends\r\nstay as they are.\r\n",
    "\n\nLeading blank lines, then text.\n",
    "Science is what we understand well enough to explain to a computer.\nArt is everything else.\n",
    "The last document.\n",
]
TOKENIZER = "tests/fuzz/corpus/tokenizer/seed-trained"  # a BPE rank file ctitan trained


def ensure_pyarrow(build):
    """Re-runs this script under $BUILD/interop-venv's python (made first when needed) unless
    pyarrow and datasets import here. Returns False when they cannot be had."""
    try:
        import pyarrow  # noqa: F401
        import datasets  # noqa: F401
        return True
    except ImportError:
        pass
    venv = os.path.join(build, "interop-venv")
    py = os.path.join(venv, "bin", "python")
    if os.path.abspath(sys.executable) == os.path.abspath(py):
        print("SKIP parquet_corpus: pyarrow / datasets do not import in the interop venv")
        return False
    if not os.path.exists(py):
        print(f"parquet_corpus: making {venv} (pip install pyarrow datasets)", flush=True)
        r = subprocess.run([sys.executable, "-m", "venv", venv], capture_output=True, text=True)
        if r.returncode != 0:
            print(f"SKIP parquet_corpus: python3 -m venv failed: {(r.stderr.strip().splitlines() or ['?'])[-1]}")
            return False
    r = subprocess.run([py, "-c", "import pyarrow, datasets"], capture_output=True)
    if r.returncode != 0:
        r = subprocess.run([py, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "pyarrow", "datasets"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            print(f"SKIP parquet_corpus: pip could not install pyarrow / datasets: "
                  f"{(r.stderr.strip().splitlines() or ['?'])[-1]}")
            return False
    os.execv(py, [py] + sys.argv)


def folder_hash(d):
    h = hashlib.sha256()
    for name in sorted(os.listdir(d)):
        h.update(name.encode())
        with open(os.path.join(d, name), "rb") as f:
            h.update(f.read())
    return h.hexdigest()


class Run:
    def __init__(self, ctitan, tmp):
        self.ctitan, self.tmp, self.failed, self.n = ctitan, tmp, 0, 0

    def check(self, ok, name, why=""):
        print(f"{'PASS' if ok else 'FAIL'} {name}{'' if ok else ': ' + why}", flush=True)
        self.failed += not ok

    def prepare(self, path, shard_tokens=97):
        self.n += 1
        out = os.path.join(self.tmp, f"out{self.n}")
        r = subprocess.run([self.ctitan, "data", "prepare", "--input", path, "--tokenizer", TOKENIZER, "--out", out,
                            "--quiet", "--val-fraction", "0.25", "--shard-tokens", str(shard_tokens)],
                           capture_output=True, text=True)
        return r, out


def write_variants(pa, pq, docs, d, tag):
    """Every pyarrow way of storing docs: {name: path}."""
    paths = {}
    stem = tag.replace(" ", "_")
    for comp in ["none", "snappy", "gzip", "zstd"]:
        for dic in [True, False]:
            for v in ["1.0", "2.0"]:
                name = f"{tag} {comp} {'dict' if dic else 'plain'} v{v[0]}"
                p = os.path.join(d, name.replace(" ", "_").replace(",", "") + ".parquet")
                pq.write_table(pa.table({"id": list(range(len(docs))), "text": docs}), p, compression=comp,
                               use_dictionary=dic, data_page_version=v, row_group_size=max(2, len(docs) // 7),
                               data_page_size=512)
                paths[name] = p
    req = pa.schema([pa.field("text", pa.string(), nullable=False)])
    p = os.path.join(d, f"{stem}_required_crc.parquet")
    pq.write_table(pa.table({"text": docs}, schema=req), p, write_page_checksum=True, compression="snappy")
    paths[f"{tag} REQUIRED, page CRC-32s"] = p
    p = os.path.join(d, f"{stem}_large_string.parquet")
    pq.write_table(pa.table({"text": pa.array(docs, pa.large_string())}), p, compression="zstd")
    paths[f"{tag} large_string"] = p
    p = os.path.join(d, f"{stem}_dict_fallback.parquet")
    pq.write_table(pa.table({"text": docs}), p, dictionary_pagesize_limit=256, data_page_size=256,
                   compression="gzip")
    paths[f"{tag} dictionary falling back to PLAIN"] = p
    return paths


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(os.environ.get("BUILD", "build"), "ctitan"))
    args = ap.parse_args()
    build = os.environ.get("BUILD", "build")
    if not ensure_pyarrow(build):
        return 0
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq
    datasets.disable_progress_bars()
    print(f"parquet_corpus: pyarrow {pa.__version__}, datasets {datasets.__version__}", flush=True)
    tmp = tempfile.mkdtemp(prefix="ct_parquet_corpus_")
    run = Run(os.path.abspath(args.bin), tmp)
    try:
        big = [("row %d: %s\n" % (i, " ".join(["w%d" % ((i * 7 + k) % 50) for k in range(i % 40)])))
               * (1 + i % 3) for i in range(1500)]
        big[17] = ""
        for tag, docs, per_shard in [("docs", DOCS, 97), ("1500 rows", big, 4099)]:
            text = os.path.join(tmp, tag.replace(" ", "_") + ".txt")
            with open(text, "w", encoding="utf-8", newline="") as f:
                f.write("%\n".join(docs))
            r, out = run.prepare(text, per_shard)
            run.check(r.returncode == 0, f"{tag}: text prepared", r.stderr.strip())
            if r.returncode:
                continue
            ref = folder_hash(out)
            print(f"  {tag} as text: {ref[:16]} ({len(os.listdir(out))} shards)")
            paths = write_variants(pa, pq, docs, tmp, tag)
            p = os.path.join(tmp, tag.replace(" ", "_") + "_datasets.parquet")
            datasets.Dataset.from_dict({"text": docs, "n": list(range(len(docs)))}).to_parquet(p)
            paths[f"{tag} datasets.to_parquet"] = p
            for name, path in paths.items():
                r, out = run.prepare(path, per_shard)
                h = folder_hash(out) if r.returncode == 0 else "-"
                print(f"  {name}: {h[:16]}")
                run.check(r.returncode == 0 and h == ref, f"{name}: the same shards as the text",
                          r.stderr.strip() or f"{h[:16]} != {ref[:16]}")

        # Files ctitan refuses: one line naming the file (and the column), no output folder.
        bad = {
            "nulls": (pa.table({"text": ["a", None, "b"]}), {}, "a null"),
            "LZ4": (pa.table({"text": ["a", "b"]}), {"compression": "lz4"}, "compression LZ4_RAW is not supported"),
            "BROTLI": (pa.table({"text": ["a", "b"]}), {"compression": "brotli"}, "compression BROTLI is not supported"),
            "DELTA_BYTE_ARRAY": (pa.table({"text": ["a", "b"]}),
                                 {"use_dictionary": False, "column_encoding": {"text": "DELTA_BYTE_ARRAY"}},
                                 "DELTA_BYTE_ARRAY encoding are not supported"),
            "DELTA_LENGTH_BYTE_ARRAY": (pa.table({"text": ["a", "b"]}),
                                        {"use_dictionary": False, "column_encoding": {"text": "DELTA_LENGTH_BYTE_ARRAY"}},
                                        "DELTA_LENGTH_BYTE_ARRAY encoding are not supported"),
            "a nested column": (pa.table({"text": [{"x": "a"}]}), {}, "is nested"),
            "an integer column": (pa.table({"text": [1, 2]}), {}, "holds INT64 values"),
            "binary, not string": (pa.table({"text": pa.array([b"a"], pa.binary())}), {}, "is binary"),
        }
        for name, (table, kw, want) in bad.items():
            p = os.path.join(tmp, "bad_" + name.replace(" ", "_") + ".parquet")
            pq.write_table(table, p, **kw)
            r, out = run.prepare(p)
            err = r.stderr.strip()
            ok = r.returncode != 0 and want in err and p in err and "\n" not in err and not os.path.exists(out)
            run.check(ok, f"refused: {name}", err or "accepted")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if run.failed else 0


if __name__ == "__main__":
    sys.exit(main())
