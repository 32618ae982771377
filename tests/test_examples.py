"""The example training script: trains, checkpoints, and resumes where it stopped."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "examples" / "train_mnist_like.py"


def train(output: Path, *arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--output", str(output), *arguments],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_restarted_run_resumes_from_its_latest_checkpoint(tmp_path):
    first = train(tmp_path, "--steps", "20", "--checkpoint-every", "10")
    second = train(tmp_path, "--steps", "30", "--checkpoint-every", "10")

    assert first.returncode == 0, first.stderr
    assert "resumed" not in first.stdout
    assert "resumed from checkpoint-20.pt at step 20" in second.stdout
    assert sorted(path.name for path in tmp_path.glob("checkpoint-*.pt")) == [
        "checkpoint-20.pt",
        "checkpoint-30.pt",
    ]


def test_a_run_restarted_after_its_last_checkpoint_ends_at_once(tmp_path):
    """As a job retried after its last step was saved (and then killed) is."""
    first = train(tmp_path, "--steps", "20")
    second = train(tmp_path, "--steps", "20")

    assert first.returncode == 0, first.stderr
    assert second.returncode == 0, second.stderr
    assert "resumed from checkpoint-20.pt at step 20" in second.stdout
    assert "rank 0: done, no step left" in second.stdout


def test_sigterm_saves_a_checkpoint_before_leaving(tmp_path):
    process = subprocess.Popen(
        [sys.executable, str(SCRIPT), "--output", str(tmp_path), "--steps", "100000",
         "--checkpoint-every", "1000000", "--step-seconds", "0.01"],
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    for line in process.stdout:
        if "step 10/" in line:  # it is training: ask it to stop, as a preemption does
            process.send_signal(signal.SIGTERM)
            break
    output = process.communicate(timeout=60)[0]

    assert process.returncode == 143
    assert "stopping at step" in output
    assert len(list(tmp_path.glob("checkpoint-*.pt"))) == 1
