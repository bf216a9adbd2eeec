"""A checkpoint is the set of files its manifest lists, all of one step of one run. Damage of the
kinds a person or a script can do by hand must be refused by name, by `inspect` (exit 1) and by
`train`'s resume (which skips the step with a warning and resumes from the one before):

  unlisted     actor.h5 dropped from the manifest's files[] and filled with garbage
  other_step   step_4's actor.h5 copied into step_12, the manifest made to vouch for it again
  other_run    another run's step_12 actor.h5 copied in, the manifest made to vouch for it again

    check_checkpoint_identity.py WORKDIR RECOMMIT -- MPIRUN... -np QUARTET
RECOMMIT is io_make_checkpoints (its `recommit STEP_DIR` rewrites a step's manifest).
"""
import json
import os
import re
import shutil
import subprocess
import sys


def fail(msg):
    sys.exit(f"check_checkpoint_identity: {msg}")


def run(cmd, expect=None):
    p = subprocess.run(cmd, capture_output=True, text=True)
    out = p.stdout + p.stderr
    if expect is not None and p.returncode != expect:
        fail(f"{' '.join(cmd)} exited {p.returncode}, expected {expect}:\n{out[-4000:]}")
    return p.returncode, out


def main():
    args = sys.argv[1:]
    split = args.index("--")
    work, recommit = args[:split]
    command = args[split + 1:]
    launcher, quartet = command[:-1], command[-1]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)

    def train(out, *sets, expect=0):
        cmd = launcher + ["3", quartet, "train", "inputs/demo.deck", "--set", f"run.out={out}",
                          "--set", "checkpoint.every=4", "--set", "checkpoint.keep=5"]
        for s in sets:
            cmd += ["--set", s]
        return run(cmd, expect)[1]

    original, other = os.path.join(work, "original"), os.path.join(work, "other")
    train(original, "run.iterations=12")
    train(other, "run.iterations=12")

    cases = {
        "unlisted": [r"step_12/actor\.h5: in the directory, but not in the manifest",
                     r"step_12/manifest\.json: lists no actor\.h5, which {reader} needs"],
        "other_step": [r"step_12/actor\.h5: holds iteration 4 \(a file of step_4\?\), the manifest step 12",
                       r"step_12/actor\.h5: records \d+ optimizer steps, trainer\.h5 \d+"],
        "other_run": [r"step_12/actor\.h5: belongs to run '[0-9a-f]{{32}}', trainer\.h5 to run '[0-9a-f]{{32}}'"],
    }
    for case, expected in cases.items():
        out = os.path.join(work, case)
        shutil.copytree(original, out, symlinks=True)
        step = os.path.join(out, "checkpoints", "step_12")
        actor = os.path.join(step, "actor.h5")
        if case == "unlisted":
            with open(os.path.join(step, "manifest.json")) as f:
                manifest = json.load(f)
            size = next(e["bytes"] for e in manifest["files"] if e["name"] == "actor.h5")
            manifest["files"] = [e for e in manifest["files"] if e["name"] != "actor.h5"]
            with open(os.path.join(step, "manifest.json"), "w") as f:
                json.dump(manifest, f, indent=2)
            with open(actor, "wb") as f:
                f.write(os.urandom(size))
        else:
            source = os.path.join(original if case == "other_step" else other, "checkpoints",
                                  "step_4" if case == "other_step" else "step_12", "actor.h5")
            shutil.copyfile(source, actor)
            run([recommit, "recommit", step], expect=0)

        rc, text = run([quartet, "inspect", step])
        if rc != 1:
            fail(f"{case}: inspect exited {rc}, expected 1 (damaged):\n{text}")
        for pattern in expected:
            if not re.search(pattern.format(reader="inspect"), text):
                fail(f"{case}: inspect does not say /{pattern}/:\n{text}")

        text = train(out, "run.iterations=14")
        if not re.search(r"warning: checkpoint step_12 skipped", text):
            fail(f"{case}: resume did not skip step_12:\n{text[-4000:]}")
        for pattern in expected:
            if not re.search(pattern.format(reader="resuming this run"), text):
                fail(f"{case}: resume's warning does not say /{pattern}/:\n{text[-4000:]}")
        if not re.search(r"train: resuming from \S*step_8: 8 of 14", text):
            fail(f"{case}: did not resume from step_8:\n{text[-4000:]}")
        print(f"check_checkpoint_identity: {case}: inspect and resume refuse step_12 by name; resumed from step_8")


if __name__ == "__main__":
    main()
