"""Compares ucxcoll's JUnit XML report of run_torch_dist_tests.py with what
passes on gloo: lists every test that passed on gloo but not on ucxcoll,
and exits non-zero if there is one that is not in KNOWN (name: reason).

    python test/conformance/compare.py gloo.xml ucxcoll.xml
    python test/conformance/compare.py passing_on_gloo_w2.txt ucxcoll.xml [rerun.xml]
    python test/conformance/compare.py --write-list gloo.xml passing_on_gloo_w2.txt
    python test/conformance/compare.py --failed ucxcoll.xml   (failed tests not in KNOWN)
    python test/conformance/compare.py --to-run passing_on_gloo_w2.txt   (what CI runs)

What passes on gloo comes from a gloo report of the same run, or from a
list written from one earlier (--write-list; one name per line), so that CI
runs the suite on ucxcoll alone. A test that failed in the first report and
passed in `rerun.xml` (the failures run once more) counts as passed; both
are printed.
"""

import sys
import xml.etree.ElementTree as ET

# Tests that pass on gloo and do not pass on ucxcoll, with the reason.
_MODEL_BY_NAME = (
    "the test builds its model only when the backend's name is mpi, gloo or nccl, so under any other name it "
    "fails before it calls ucxcoll (UnboundLocalError: ddp_model)"
)
KNOWN: dict[str, str] = {
    "test_ddp_logging_data_cpu": "DDP's logger reports every plugin backend as 'custom', and the test "
    "expects the backend's own name",
    "test_accumulate_gradients_no_sync": _MODEL_BY_NAME,
    "test_accumulate_gradients_no_sync_allreduce_hook": _MODEL_BY_NAME,
    "test_accumulate_gradients_no_sync_allreduce_with_then_hook": _MODEL_BY_NAME,
    "test_accumulate_gradients_no_sync_grad_is_view": _MODEL_BY_NAME,
}


def outcomes(path: str) -> dict[str, str]:
    result = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        status = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                status = "failed"
            elif child.tag == "skipped":
                status = "skipped"
        result[case.get("name")] = status
    return result


def passing_on_gloo(path: str) -> list[str]:
    if path.endswith(".xml"):
        return sorted(name for name, status in outcomes(path).items() if status == "passed")
    with open(path) as names:
        return sorted(line.strip() for line in names if line.strip() and not line.startswith("#"))


def main(argv: list[str]) -> int:
    if argv[0] == "--failed":
        # What is worth running again: a KNOWN failure fails every time.
        print(" ".join(name for name, status in outcomes(argv[1]).items() if status == "failed" and name not in KNOWN))
        return 0
    if argv[0] == "--to-run":
        # A KNOWN failure fails every time: CI runs the rest of the list.
        print(" ".join(name for name in passing_on_gloo(argv[1]) if name not in KNOWN))
        return 0
    if argv[0] == "--write-list":
        with open(argv[2], "w") as out:
            out.write("# tests of torch's _DistTestBase that pass on gloo (compare.py --write-list)\n")
            out.writelines(name + "\n" for name in passing_on_gloo(argv[1]))
        return 0
    expected = passing_on_gloo(argv[0])
    ours = outcomes(argv[1])
    rerun = outcomes(argv[2]) if len(argv) > 2 else {}
    for name, status in rerun.items():
        if ours.get(name) == "failed":
            print(f"  {name}: failed, then {status} when run again")
            if status == "passed":
                ours[name] = "passed"
    missing = [name for name in expected if ours.get(name) != "passed"]
    print(f"gloo passes {len(expected)}; ucxcoll passed {len(expected) - len(missing)} of those "
          f"({sum(1 for s in ours.values() if s == 'passed')} in all)")
    unexplained = []
    for name in missing:
        reason = KNOWN.get(name)
        print(f"  {name}: {ours.get(name, 'not run')}" + (f" (known: {reason})" if reason else ""))
        if reason is None:
            unexplained.append(name)
    if unexplained:
        print(f"{len(unexplained)} test(s) pass on gloo but not on ucxcoll")
    return 1 if unexplained else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
