"""Run MegEngine's own unit tests against mgegraph through the renaming-only ``megengine`` shim.

    python compat/megengine/run_tests.py --megengine ~/src/MegEngine [--groups functional module]

``--megengine`` is a checkout of MegEngine's source (nothing of it is vendored here). The tests
of ``imperative/python/test`` are copied to a scratch folder with ``conftest_template.py`` in
place of MegEngine's conftest, and each file runs in its own pytest process (so one crash or hang
costs one file, and is reported). The summary counts, per group:

- ``passed`` / ``failed`` (an assertion or an error of mgegraph's);
- ``internal``: stopped by a use of a MegEngine internal module (``megengine.core`` and the
  others in ``INTERNAL``), which mgegraph does not reproduce; these are not counted as applying;
- ``skipped``: marked for GPUs or several processes, or skipped by the test itself;
- ``collect-error``: the file could not be imported; its test functions count as failed.

The score is passed / (passed + failed + collect-error), over the groups the issue names
(functional, module, optimizer, autodiff, jit) and over every group run.
"""
import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TEST_ROOT = os.path.join("imperative", "python", "test")

# MegEngine's internals and the features other parts of mgegraph's plan cover (quantization,
# distributed training): tests stopped by them do not count as applying.
INTERNAL = ("megengine.core", "megengine.utils", "megengine.traced_module",
            "megengine.quantization", "megengine.distributed", "megengine.functional.distributed",
            "megengine.xla")

GROUPS = {
    "functional": ["unit/functional"],
    "module": ["unit/module"],
    "optimizer": ["unit/optimizer", "integration/test_optimizer.py",
                  "integration/test_lr_scheduler.py"],
    "autodiff": ["unit/autodiff", "unit/core/test_autodiff.py", "unit/core/test_function.py",
                 "integration/test_grad_detach.py"],
    "jit": ["unit/jit", "integration/test_trace_dump.py"],
    "tensor": ["unit/core/test_tensor_wrapper.py", "unit/core/test_indexing_op.py",
               "unit/core/test_zero_dim_tensor.py", "integration/test_advance_indexing.py"],
    "random": ["unit/random"],
    "amp": ["unit/amp"],
    "training": ["integration/test_bn.py", "integration/test_converge.py",
                 "integration/test_save_load.py"],
    # int8 from QAT to deployment: mgegraph.quantization, module.qat and module.quantized
    "quantization": ["unit/quantization", "unit/module/test_qat.py"],
}
# Per group, the INTERNAL names its tests count as applying: the quantization group's tests use
# megengine.quantization, which mgegraph now has (the other groups keep it internal).
APPLYING = {"quantization": ("megengine.quantization",)}
NAMED_GROUPS = ("functional", "module", "optimizer", "autodiff", "jit")
# Whole files about features other issues own or MegEngine-only machinery.
EXCLUDED_FILES = ("test_functional_distributed", "test_qat.py", "test_xla", "test_dtr.py")


def test_files(test_root, group):
    """The files of ``group``: those a folder of it lists but EXCLUDED_FILES, and each file it
    names (named on purpose, so never excluded)."""
    for entry in GROUPS[group]:
        if entry.endswith(".py"):
            yield entry
            continue
        names = sorted(os.path.join(entry, f) for f in os.listdir(os.path.join(test_root, entry))
                       if f.startswith("test_") and f.endswith(".py"))
        yield from (n for n in names if not any(x in n for x in EXCLUDED_FILES))


def internal_for(group):
    """The internal module prefixes that stop ``group``'s tests (INTERNAL less APPLYING's)."""
    return tuple(name for name in INTERNAL if name not in APPLYING.get(group, ()))


def run_file(scratch, relpath, results, timeout, internal=INTERNAL):
    env = dict(os.environ, MGE_COMPAT_RESULTS=results, MGE_COMPAT_INTERNAL=",".join(internal),
               PYTHONPATH=os.pathsep.join([HERE, os.environ.get("PYTHONPATH", "")]))
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
               "--tb=short", "-W", "ignore", relpath]
    try:
        done = subprocess.run(command, cwd=scratch, env=env, capture_output=True, text=True,
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return f"timed out after {timeout} s"
    if done.returncode < 0 or done.returncode not in (0, 1, 2, 5):
        return f"pytest exited {done.returncode}: {done.stderr.strip()[-300:]}"
    return None


def count_test_functions(path):
    with open(path, encoding="utf-8") as f:
        return max(1, len(re.findall(r"^\s*def test_", f.read(), flags=re.MULTILINE)))


def summarise(test_root, outcomes_by_group):
    totals = {}
    for group, outcomes in outcomes_by_group.items():
        counts = collections.Counter(o["outcome"] for o in outcomes)
        for o in outcomes:
            if o["outcome"] == "collect-error":
                counts["collect-error"] += count_test_functions(
                    os.path.join(test_root, o["test"].split("::")[0])) - 1
        totals[group] = counts
    return totals


def score(counts):
    applying = counts["passed"] + counts["failed"] + counts["collect-error"]
    return counts["passed"], applying


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--megengine", required=True, help="a checkout of MegEngine's source")
    parser.add_argument("--groups", nargs="*", default=list(GROUPS), choices=list(GROUPS))
    parser.add_argument("--timeout", type=int, default=600, help="seconds per test file")
    parser.add_argument("--failures", action="store_true", help="list every failing test")
    parser.add_argument("--json", help="write every outcome to this file")
    args = parser.parse_args(argv)
    source = os.path.join(os.path.expanduser(args.megengine), TEST_ROOT)
    if not os.path.isdir(source):
        parser.error(f"no {TEST_ROOT} under {args.megengine}")
    scratch = tempfile.mkdtemp(prefix="mge-tests-")
    try:
        shutil.copytree(source, scratch, dirs_exist_ok=True)
        shutil.copy(os.path.join(HERE, "conftest_template.py"),
                    os.path.join(scratch, "conftest.py"))
        results = os.path.join(scratch, "results.jsonl")
        outcomes_by_group = {}
        for group in args.groups:
            outcomes = []
            for relpath in test_files(scratch, group):
                open(results, "w").close()
                problem = run_file(scratch, relpath, results, args.timeout, internal_for(group))
                with open(results) as f:
                    found = [json.loads(line) for line in f]
                if problem:
                    found.append({"test": relpath, "outcome": "collect-error", "why": problem})
                outcomes.extend(found)
                print(f"  {relpath}: " + ", ".join(
                    f"{k} {v}" for k, v in collections.Counter(o["outcome"] for o in found)
                    .most_common()) + (f" [{problem}]" if problem else ""), flush=True)
            outcomes_by_group[group] = outcomes
        report(summarise(scratch, outcomes_by_group), outcomes_by_group, args)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def report(totals, outcomes_by_group, args):
    print(f"\n{'group':<11}{'passed':>8}{'failed':>8}{'import':>8}{'internal':>10}"
          f"{'skipped':>9}{'score':>8}")
    named, every = collections.Counter(), collections.Counter()
    for group, counts in totals.items():
        passed, applying = score(counts)
        print(f"{group:<11}{counts['passed']:>8}{counts['failed']:>8}{counts['collect-error']:>8}"
              f"{counts['internal']:>10}{counts['skipped']:>9}"
              f"{passed / max(applying, 1):>8.0%}")
        every.update(counts)
        if group in NAMED_GROUPS:
            named.update(counts)
    for label, counts in (("named", named), ("all", every)):
        passed, applying = score(counts)
        print(f"{label} groups: {passed} of {applying} applying tests pass "
              f"({passed / max(applying, 1):.0%}); {counts['internal']} stopped by internals")
    causes = collections.Counter(
        o["why"] for outcomes in outcomes_by_group.values() for o in outcomes
        if o["outcome"] in ("failed", "collect-error"))
    print("\nmost common causes:")
    for why, n in causes.most_common(40):
        print(f"{n:>5}  {why}")
    if args.failures:
        for outcomes in outcomes_by_group.values():
            for o in outcomes:
                if o["outcome"] in ("failed", "collect-error"):
                    print(f"{o['test']}: {o['why']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(outcomes_by_group, f, indent=1)


if __name__ == "__main__":
    main()
