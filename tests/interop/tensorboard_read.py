#!/usr/bin/env python3
"""ctitan's TensorBoard event files, read by the real `tensorboard` package (`make test-interop`).

`$BUILD/tests/test_tensorboard --write DIR` writes a file with src/metrics/tensorboard.c (the
fixture in tests/test_tensorboard.c); this script reads it with
  1. tensorboard's own TFRecord reader (PyRecordReader: checks both masked CRC-32Cs of every
     record) and its Event protocol buffer: the first record is file_version "brain.Event:2";
  2. EventAccumulator, what `tensorboard --logdir` uses: the scalar tags, and every step, value
     (as float32) and wall time;
  3. the same reader on a copy with one byte of an event changed: it must raise DataLossError;
  4. a short `ctitan train --metrics.enable_tensorboard true` run (4 ranks, FSDP 2 x TP 2, with
     validation): its <dump>/tb folder through EventAccumulator, the tags of every figure, and its
     losses against metrics.jsonl's.

When tensorboard does not import, it is installed with pip into $BUILD/interop-pylib (not into
the system's Python); when that fails too (no pip, no network), prints one SKIP line and exits 0.
Not part of `make test`, which needs no Python. Prints PASS/FAIL lines; exits 1 when one failed.
"""
import argparse
import glob
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile


def import_tensorboard(pylib):
    """Imports tensorboard, installing it into `pylib` first when needed; None when impossible."""
    try:
        import tensorboard  # noqa: F401
        return tensorboard
    except ImportError:
        pass
    if os.path.isdir(pylib):
        sys.path.insert(0, pylib)
    try:
        import tensorboard  # noqa: F401
        return tensorboard
    except ImportError:
        pass
    print(f"tensorboard_read: installing tensorboard into {pylib} (pip)", flush=True)
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                        "--target", pylib, "tensorboard"], capture_output=True, text=True)
    if r.returncode != 0:
        print(f"SKIP tensorboard_read: tensorboard does not import and pip could not install it: "
              f"{(r.stderr.strip().splitlines() or ['?'])[-1]}")
        return None
    if pylib not in sys.path:
        sys.path.insert(0, pylib)
    try:
        import tensorboard  # noqa: F401
        return tensorboard
    except ImportError as e:
        print(f"SKIP tensorboard_read: tensorboard installed but does not import: {e}")
        return None


def f32(x):
    """x rounded to float32, as the file holds it (simple_value is a float)."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def expected():
    """The fixture of tests/test_tensorboard.c (write_fixture): tag -> [(step, value, wall_time)]."""
    want = {"loss": [], "lr": [], "memory/params_mib": [], "comm/tp/bytes": []}
    for s in range(1, 11):
        t = 1700000000.0 + s
        want["loss"].append((s, f32(10.0 / (s + 1)), t))
        want["lr"].append((s, f32(1e-3 * s), t))
        want["memory/params_mib"].append((s, f32(123.25), t))
        want["comm/tp/bytes"].append((s, f32(1.5e9 * s), t))
    want["nonfinite"] = [(1, math.nan, 1700000001.0), (2, math.inf, 1700000002.0)]
    return want


class Checks:
    def __init__(self):
        self.passed = self.failed = 0

    def check(self, name, ok, detail=""):
        print(("PASS " if ok else "FAIL ") + name + ("" if ok else f": {detail}"), flush=True)
        if ok:
            self.passed += 1
        else:
            self.failed += 1


def read_records(path):
    """Every record's bytes through tensorboard's reader, which checks the CRCs (DataLossError)."""
    from tensorboard.compat.tensorflow_stub import errors, pywrap_tensorflow
    reader = pywrap_tensorflow.PyRecordReader_New(path)
    out = []
    while True:
        try:
            reader.GetNext()
        except errors.OutOfRangeError:
            return out
        out.append(reader.record())


# What the trainer writes (metrics.c): every figure, memory per category, and per mesh group of
# more than one rank (here fsdp = dp_shard x cp, and tp) the bytes moved and the seconds waited.
TRAIN_TAGS = ["loss", "grad_norm", "lr", "tokens_per_s", "mfu", "val_loss",
              "memory/params_mib", "memory/grads_mib", "memory/optim_mib", "memory/activations_mib",
              "comm/tp/bytes", "comm/tp/wait_s", "comm/fsdp/bytes", "comm/fsdp/wait_s"]


def train_run(ctitan, tmp, c, EventAccumulator):
    """Section 4: a real run's event files, read as `tensorboard --logdir <dump>/tb` would."""
    import json
    if not os.access(ctitan, os.X_OK):
        c.check("training run", False, f"no ctitan binary at {ctitan}")
        return
    dump = os.path.join(tmp, "run")
    steps = 6
    mpirun = ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", "4"]
    if os.geteuid() == 0:
        mpirun.insert(1, "--allow-run-as-root")
    cmd = mpirun + [ctitan, "train", "--model.dim", "64", "--model.n_layers", "2", "--model.n_heads", "4",
                    "--model.n_kv_heads", "2", "--model.vocab_size", "128", "--model.ffn_hidden_dim", "96",
                    "--training.seq_len", "32", "--training.dataset", "synthetic", "--training.steps", str(steps),
                    "--metrics.peak_tflops", "1", "--parallelism.data_shard_degree", "2",
                    "--parallelism.tensor_parallel_degree", "2", "--validation.enable", "true",
                    "--validation.freq", "3", "--validation.steps", "1",
                    "--metrics.enable_tensorboard", "true", "--job.dump_folder", dump]
    env = dict(os.environ, OMP_NUM_THREADS="1", CTITAN_TTY="0")
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    if r.returncode != 0:
        c.check("training run with TensorBoard", False, (r.stdout + r.stderr).strip()[-800:])
        return
    files = glob.glob(os.path.join(dump, "tb", "events.out.tfevents.*"))
    c.check("training run: one event file in <dump>/tb (rank 0's)", len(files) == 1, str(files))
    acc = EventAccumulator(os.path.join(dump, "tb"), size_guidance={"scalars": 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    missing = [t for t in TRAIN_TAGS if t not in tags]
    c.check("training run: every figure's tag", not missing, f"missing {missing}; has {sorted(tags)}")
    with open(os.path.join(dump, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    want = {row["step"]: row["loss"] for row in rows}
    got = {e.step: e.value for e in acc.Scalars("loss")} if "loss" in tags else {}
    close = sorted(got) == sorted(want) == list(range(1, steps + 1)) and all(
        abs(got[s] - want[s]) <= 1e-5 * abs(want[s]) + 1e-6 for s in want)
    c.check("training run: loss per step = metrics.jsonl's", close, f"{got} vs {want}")
    vsteps = [e.step for e in acc.Scalars("val_loss")] if "val_loss" in tags else []
    c.check("training run: val_loss at the validation steps", vsteps == [3, 6], str(vsteps))
    moved = [e.value for e in acc.Scalars("comm/tp/bytes")] if "comm/tp/bytes" in tags else []
    c.check("training run: tp bytes every step, > 0", len(moved) == steps and min(moved) > 0, str(moved))


def main():
    ap = argparse.ArgumentParser()
    build = os.environ.get("BUILD", "build")
    ap.add_argument("--writer", default=os.path.join(build, "tests", "test_tensorboard"),
                    help="test_tensorboard binary (its --write DIR mode writes the fixture)")
    ap.add_argument("--pylib", default=os.path.join(build, "interop-pylib"))
    ap.add_argument("--bin", default=os.path.join(build, "ctitan"), help="ctitan, for the training run")
    args = ap.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    if import_tensorboard(os.path.abspath(args.pylib)) is None:
        return 0
    if not os.access(args.writer, os.X_OK):
        print(f"FAIL tensorboard_read: no writer at {args.writer} (make BUILD=... {args.writer} first)")
        return 1
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.compat.proto import event_pb2
    from tensorboard.compat.tensorflow_stub import errors

    c = Checks()
    with tempfile.TemporaryDirectory() as tmp:
        logdir = os.path.join(tmp, "tb")
        r = subprocess.run([args.writer, "--write", logdir], capture_output=True, text=True)
        if r.returncode != 0:
            c.check("write fixture", False, r.stderr.strip())
            return 1
        files = glob.glob(os.path.join(logdir, "events.out.tfevents.*"))
        c.check("one event file named events.out.tfevents.<time>.<host>...", len(files) == 1, str(files))
        if len(files) != 1:
            return 1
        path = files[0]

        # 1. tensorboard's record reader (CRCs) and Event message.
        try:
            records = read_records(path)
        except errors.DataLossError as e:
            c.check("records pass tensorboard's CRC checks", False, str(e))
            return 1
        c.check("records pass tensorboard's CRC checks", len(records) == 1 + 4 * 10 + 2, f"{len(records)} records")
        first = event_pb2.Event.FromString(records[0])
        c.check("first event: file_version brain.Event:2", first.file_version == "brain.Event:2", str(first))

        # 2. EventAccumulator, as `tensorboard --logdir` loads the folder.
        acc = EventAccumulator(logdir, size_guidance={"scalars": 0})
        acc.Reload()
        want = expected()
        tags = sorted(acc.Tags()["scalars"])
        c.check("scalar tags", tags == sorted(want), f"{tags} vs {sorted(want)}")
        c.check("file version 2 seen by EventAccumulator", acc.file_version == 2.0, str(acc.file_version))
        for tag, rows in want.items():
            if tag not in tags:
                continue
            got = [(e.step, e.value, e.wall_time) for e in acc.Scalars(tag)]
            same = len(got) == len(rows) and all(
                gs == ws and gt == wt and (gv == wv or (math.isnan(gv) and math.isnan(wv)))
                for (gs, gv, gt), (ws, wv, wt) in zip(got, rows))
            c.check(f"scalars of {tag}: steps, values, wall times", same, f"{got} vs {rows}")

        # 3. A changed byte inside an event is caught by the reader's CRC check.
        bad = os.path.join(tmp, "corrupt")
        shutil.copyfile(path, bad)
        with open(bad, "r+b") as f:
            data = bytearray(f.read())
            first_len = struct.unpack("<Q", data[:8])[0]
            pos = 12 + first_len + 4 + 12 + 5  # inside the second record's event
            data[pos] ^= 0x10
            f.seek(0)
            f.write(data)
        try:
            read_records(bad)
            caught = False
        except errors.DataLossError:
            caught = True
        c.check("a changed byte fails tensorboard's CRC check", caught)

        train_run(args.bin, tmp, c, EventAccumulator)

    print(f"{c.passed} passed, {c.failed} failed")
    return 1 if c.failed else 0


if __name__ == "__main__":
    sys.exit(main())
