"""One script for every fuzz campaign: structure-aware, coverage-guided (atheris/libFuzzer).

    python tests/fuzz/fuzz.py --target check_model --runs 1000000 [--seconds S] [--jobs J]
    python tests/fuzz/fuzz.py --target all --runs 300          # the short run CI does

Targets: check_model, validate, view, decode, lower, infer_shapes, from_gguf. Each input becomes a
model with struct parts (tests/fuzz/generate.py) or a GGUF file, is written to a scratch
directory, and goes through the target. Accepted outcomes: success or onnx_struct.ValidationError.
Everything else is a finding, saved as a replayable case under tests/fuzz/findings/<target>/:
  escape-*   another exception (the worker records it and goes on fuzzing)
  timeout-*  one input ran longer than --timeout seconds (libFuzzer's -timeout)
  oom-*      RSS beyond --rss-limit-mb (libFuzzer's -rss_limit_mb)
  crash-*    the interpreter died (signal)
After a timeout, OOM or crash the worker is restarted on the same corpus until --runs inputs
were tried. The summary gives inputs tried, coverage (libFuzzer's cov/ft over the instrumented
onnx_struct, and gguf-py for from_gguf), exec/s and findings; exit 1 if there was any finding.
Arguments after ``--`` go to libFuzzer unchanged.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent
REPO = TESTS.parent
# Run as a script, this file's directory is sys.path[0], where ``import fuzz`` would find this
# file; the package tests/fuzz must be found instead (from tests/).
sys.path[:] = [str(TESTS), str(REPO)] + [p for p in sys.path if Path(p or ".").resolve() not in (HERE, TESTS, REPO)]

TARGET_NAMES = ["check_model", "validate", "view", "decode", "lower", "infer_shapes", "from_gguf"]
FINDING = "@@finding@@ "


# -- the worker (one libFuzzer process) -------------------------------------------------------
def _instrumented_imports(target: str) -> None:
    import atheris
    import numpy  # noqa: F401 - imported uninstrumented first: coverage is onnx_struct's own
    import onnx  # noqa: F401

    include = ["onnx_struct"] + (["gguf"] if target == "from_gguf" else [])
    with atheris.instrument_imports(include=include):
        import pkgutil

        import onnx_struct

        for module in pkgutil.walk_packages(onnx_struct.__path__, "onnx_struct."):
            if "._make_" not in module.name and not module.name.endswith("__main__"):
                __import__(module.name)
        if target == "from_gguf":
            import gguf  # noqa: F401


def _signature(error: BaseException) -> str:
    """Exception type and the innermost onnx_struct (else innermost) frame: one finding each."""
    frames = traceback.extract_tb(error.__traceback__)
    ours = [f for f in frames if "onnx_struct" in f.filename] or frames[-1:]
    where = f"{Path(ours[-1].filename).name}:{ours[-1].lineno}" if ours else "?"
    return f"{type(error).__module__}.{type(error).__qualname__}@{where}"


def _save_finding(findings: Path, target: str, kind: str, signature: str, case, data: bytes, detail: str) -> Path:
    """Keep the smallest input per (target, kind, signature)."""
    digest = hashlib.sha1(signature.encode()).hexdigest()[:10]
    root = findings / target / f"{kind}-{digest}"
    previous = root / "input.bin"
    if previous.exists() and len(previous.read_bytes()) <= len(data):
        return root
    case.save(root, target, data)
    meta = json.loads((root / "case.json").read_text())
    meta.update(kind=kind, signature=signature)
    (root / "case.json").write_text(json.dumps(meta, indent=1) + "\n")
    (root / "traceback.txt").write_text(detail)
    return root


def worker(args: argparse.Namespace, libfuzzer_args: list[str]) -> None:
    import resource

    import atheris

    address_space = max(4 * args.rss_limit_mb, 8192) << 20  # a backstop; libFuzzer watches RSS
    resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
    _instrumented_imports(args.target)
    from fuzz.cases import Case
    from fuzz.generate import build_case
    from fuzz.targets import TARGETS, is_accepted

    run_target = TARGETS[args.target]
    scratch = Path(args.scratch)
    os.chdir(tempfile.mkdtemp(prefix="cwd-", dir=scratch))  # decoders must not read from here
    findings = Path(args.findings)

    def one_input(data: bytes) -> None:
        case = Case(gguf=data) if args.target == "from_gguf" else build_case(data)
        path = case.write(scratch / "case")
        try:
            run_target(case, path)
        except Exception as error:  # noqa: BLE001 - the acceptance rule decides
            if is_accepted(error):
                return
            signature = _signature(error)
            detail = "".join(traceback.format_exception(error))[-6000:]
            root = _save_finding(findings, args.target, "escape", signature, case, data, detail)
            report = {"kind": "escape", "signature": signature, "path": str(root), "error": str(error)[:300]}
            print(FINDING + json.dumps(report), file=sys.stderr, flush=True)

    atheris.Setup([sys.argv[0], *libfuzzer_args], one_input)
    atheris.Fuzz()


# -- the driver ------------------------------------------------------------------------------
ARTIFACT = re.compile(r"^(timeout|oom|crash|leak)-([0-9a-f]+)$")  # slow-unit-*: finished, only slow
PROGRESS = re.compile(r"^#(\d+)\s+\w+\s+cov: (\d+) ft: (\d+).*?exec/s: (\d+)")


class Job:
    """One worker slot: restarts its libFuzzer process until its share of runs is done."""

    def __init__(self, args, target: str, index: int, runs: int, deadline: float, corpus: Path, work: Path):
        self.args, self.target, self.index = args, target, index
        self.runs, self.deadline, self.corpus = runs, deadline, corpus
        self.work = work / f"job{index}"
        self.executed = self.cov = self.ft = self.restarts = 0
        self.findings: list[dict] = []

    def run(self) -> None:
        artifacts = self.work / "artifacts"
        artifacts.mkdir(parents=True, exist_ok=True)
        while self.executed < self.runs and time.time() < self.deadline and self.restarts <= self.args.max_restarts:
            remaining_time = max(1, int(self.deadline - time.time()))
            log = self.work / f"log{self.restarts}.txt"
            command = [
                sys.executable,
                str(Path(__file__).resolve()),
                "--worker",
                "--target",
                self.target,
                "--findings",
                str(self.args.findings),
                "--scratch",
                str(self.work),
                "--rss-limit-mb",
                str(self.args.rss_limit_mb),
                "--",
                str(self.corpus),
                f"-runs={self.runs - self.executed}",
                f"-max_total_time={remaining_time}",
                f"-timeout={self.args.timeout}",
                f"-rss_limit_mb={self.args.rss_limit_mb}",
                f"-max_len={self.args.max_len}",
                f"-seed={self.args.seed + 1000 * self.index + self.restarts}",
                f"-artifact_prefix={artifacts}/",
                "-print_final_stats=1",
                *self.args.libfuzzer,
            ]
            env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([str(REPO), str(TESTS)]))
            with open(log, "w") as out:
                subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, env=env, stdin=subprocess.DEVNULL)
            self._parse(log.read_text(errors="replace"))
            crashed = self._collect(artifacts, log)
            if not crashed:
                break
            self.restarts += 1

    def _parse(self, text: str) -> None:
        executed = 0
        for line in text.splitlines():
            if line.startswith(FINDING):
                report = json.loads(line[len(FINDING) :])
                if report["signature"] not in {f["signature"] for f in self.findings}:
                    self.findings.append(report)
                    if not self.args.quiet:
                        print(f"[{self.target}] escape {report['signature']}: {report['error'][:160]}", flush=True)
            match = PROGRESS.match(line)
            if match:
                executed = int(match[1])
                self.cov, self.ft = max(self.cov, int(match[2])), max(self.ft, int(match[3]))
            elif line.startswith("stat::number_of_executed_units:"):
                executed = int(line.split(":")[-1])
        self.executed += executed

    def _collect(self, artifacts: Path, log: Path) -> bool:
        """Turn libFuzzer's artifacts (raw fuzz bytes) into replayable cases; True if any."""
        from fuzz.cases import Case
        from fuzz.generate import build_case

        found = False
        for artifact in sorted(artifacts.iterdir()):
            match = ARTIFACT.match(artifact.name)
            if not match:
                continue
            found = True
            data = artifact.read_bytes()
            text = log.read_text(errors="replace")
            frames = re.findall(r'File "([^"]*onnx_struct[^"]*|[^"]*gguf[^"]*)", line (\d+)', text)
            where = f"{Path(frames[0][0]).name}:{frames[0][1]}" if frames else "?"  # faulthandler: innermost first
            signature = f"{match[1]}@{where}"
            try:
                case = Case(gguf=data) if self.target == "from_gguf" else build_case(data)
            except Exception:  # noqa: BLE001 - a generator bug: keep the raw input, name it in the signature
                case, signature = Case(), f"generator-{signature}"
            root = _save_finding(Path(self.args.findings), self.target, match[1], signature, case, data, text[-6000:])
            self.findings.append({"kind": match[1], "signature": signature, "path": str(root), "error": ""})
            if not self.args.quiet:
                print(f"[{self.target}] {match[1]} at {where}: {root}", flush=True)
            artifact.unlink()
        return found


def seed_corpus(target: str, corpus: Path) -> None:
    from fuzz.seeds import gguf_seeds, model_seeds

    corpus.mkdir(parents=True, exist_ok=True)
    for data in gguf_seeds() if target == "from_gguf" else model_seeds():
        (corpus / f"seed-{hashlib.sha1(data).hexdigest()[:12]}").write_bytes(data)


def campaign(args: argparse.Namespace, target: str) -> dict:
    start = time.time()
    deadline = start + (args.seconds or 10**9)
    # Every input is written out as a model directory: on tmpfs that costs a third of the disk's.
    shm = Path("/dev/shm")
    work = Path(tempfile.mkdtemp(prefix=f"fuzz-{target}-", dir=shm if os.access(shm, os.W_OK) else None))
    corpus = Path(args.corpus) / target if args.corpus else work / "corpus"
    seed_corpus(target, corpus)
    share = -(-args.runs // args.jobs)
    jobs = [Job(args, target, j, share, deadline, corpus, work) for j in range(args.jobs)]
    threads = [threading.Thread(target=job.run) for job in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.time() - start
    if not args.keep_work:
        shutil.rmtree(work, ignore_errors=True)
    findings = [f for job in jobs for f in job.findings]
    executed = sum(job.executed for job in jobs)
    kinds = {kind: sum(f["kind"] == kind for f in findings) for kind in ("escape", "timeout", "oom", "crash")}
    return {
        "target": target,
        "inputs": executed,
        "seconds": round(elapsed, 1),
        "exec_per_s": round(executed / elapsed, 1) if elapsed else 0,
        "cov": max(job.cov for job in jobs),
        "ft": max(job.ft for job in jobs),
        "restarts": sum(job.restarts for job in jobs),
        **kinds,
        "findings": [f["path"] for f in findings],
    }


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    libfuzzer = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", required=True, help=f"one of {', '.join(TARGET_NAMES)}, or all")
    parser.add_argument("--runs", type=int, default=1000, help="inputs per target")
    parser.add_argument("--seconds", type=float, default=0, help="wall-clock budget per target (0: none)")
    parser.add_argument("--jobs", type=int, default=1, help="parallel workers per target")
    parser.add_argument("--timeout", type=int, default=10, help="seconds one input may take")
    parser.add_argument("--rss-limit-mb", type=int, default=2048)
    parser.add_argument("--max-len", type=int, default=16384, help="bytes of one fuzz input")
    parser.add_argument("--max-restarts", type=int, default=20, help="worker restarts after timeouts/OOMs/crashes")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--findings", default=str(HERE / "findings"))
    parser.add_argument("--corpus", default="", help="keep the corpus here (per target); default: a temp dir")
    parser.add_argument("--json", default="", help="also write the summary to this file")
    parser.add_argument("--keep-work", action="store_true")
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--scratch", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.libfuzzer = libfuzzer
    if args.worker:
        worker(args, libfuzzer)
        return 0
    targets = TARGET_NAMES if args.target == "all" else args.target.split(",")
    unknown = set(targets) - set(TARGET_NAMES)
    if unknown:
        parser.error(f"unknown target(s) {', '.join(sorted(unknown))}")
    if args.json:  # made now: a missing directory would otherwise surface only after the campaign
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    summaries = [campaign(args, target) for target in targets]
    print(
        f"{'target':<13}{'inputs':>10}{'exec/s':>9}{'cov':>7}{'ft':>8}{'escapes':>9}{'timeouts':>9}{'ooms':>6}{'crashes':>8}"
    )
    for s in summaries:
        print(
            f"{s['target']:<13}{s['inputs']:>10}{s['exec_per_s']:>9}{s['cov']:>7}{s['ft']:>8}"
            f"{s['escape']:>9}{s['timeout']:>9}{s['oom']:>6}{s['crash']:>8}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(summaries, indent=1) + "\n")
    return 1 if any(s["findings"] for s in summaries) else 0


if __name__ == "__main__":
    sys.exit(main())
