"""Classifying failed attempts and deciding retries (pure: no database)."""

from __future__ import annotations

import re

import pytest

from jobmanager.retries import (
    Classification,
    FailureClass,
    RetryDecision,
    classify,
    default_rules,
    load_rules,
    parse_rules,
    read_log_tail,
    retry_decision,
    system_requeue,
)

# ---- realistic log tails, one per default rule --------------------------------------

SYNTAX_ERROR = """\
Traceback (most recent call last):
  File "/workspace/train.py", line 12, in <module>
    from models.vit import build_model
  File "/workspace/models/vit.py", line 88
    x = self.proj(x
                 ^
SyntaxError: '(' was never closed
"""

INDENTATION_ERROR = """\
  File "/workspace/train.py", line 41
    optimizer.step()
IndentationError: unexpected indent
"""

MODULE_NOT_FOUND = """\
Traceback (most recent call last):
  File "/workspace/train.py", line 3, in <module>
    import wandb
ModuleNotFoundError: No module named 'wandb'
"""

IMPORT_ERROR = """\
Traceback (most recent call last):
  File "/workspace/finetune.py", line 7, in <module>
    from transformers import LlamaForCausalLM
ImportError: cannot import name 'LlamaForCausalLM' from 'transformers' \
(/usr/local/lib/python3.10/dist-packages/transformers/__init__.py)
"""

NAME_ERROR = """\
Traceback (most recent call last):
  File "/workspace/train.py", line 120, in <module>
    main()
  File "/workspace/train.py", line 97, in main
    for step, batch in enumerate(train_loder):
NameError: name 'train_loder' is not defined. Did you mean: 'train_loader'?
"""

ARGPARSE_UNRECOGNIZED = """\
usage: train.py [-h] [--lr LR] [--epochs EPOCHS] --data DATA
train.py: error: unrecognized arguments: --learning-rate 3e-4
"""

ARGPARSE_REQUIRED = """\
usage: train.py [-h] [--lr LR] --data DATA
train.py: error: the following arguments are required: --data
"""

CLICK_USAGE = """\
Usage: pretrain.py [OPTIONS] CONFIG
Try 'pretrain.py --help' for help.

Error: No such option: --nodes
"""

SCRIPT_NOT_FOUND = (
    "python: can't open file '/workspace/trian.py': [Errno 2] No such file or directory\n"
)

COMMAND_NOT_FOUND = "bash: line 1: torchrunn: command not found\n"

FILE_NOT_FOUND = """\
Traceback (most recent call last):
  File "/workspace/train.py", line 55, in <module>
    dataset = ImageFolder(args.data)
  File "/usr/local/lib/python3.10/dist-packages/torchvision/datasets/folder.py", line 36, \
in find_classes
    classes = sorted(entry.name for entry in os.scandir(directory) if entry.is_dir())
FileNotFoundError: [Errno 2] No such file or directory: '/data/imagenet/trian'
"""

PERMISSION_DENIED = """\
Traceback (most recent call last):
  File "/workspace/train.py", line 201, in save
    torch.save(state, "/mnt/shared/vision-team/ckpt/last.pt")
PermissionError: [Errno 13] Permission denied: '/mnt/shared/vision-team/ckpt/last.pt'
"""

CUDA_OOM = """\
  File "/usr/local/lib/python3.10/dist-packages/torch/nn/modules/linear.py", line 116, in forward
    return F.linear(input, self.weight, self.bias)
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total \
capacity of 79.15 GiB of which 1.06 GiB is free. Process 23117 has 78.08 GiB memory in use. \
Of the allocated memory 75.93 GiB is allocated by PyTorch, and 1.52 GiB is reserved by \
PyTorch but unallocated. If reserved but unallocated memory is large try setting \
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation \
for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)
"""

CUBLAS_ALLOC_FAILED = (
    "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`\n"
)

DEVICE_SIDE_ASSERT = """\
../aten/src/ATen/native/cuda/Loss.cu:250: nll_loss_forward_reduce_cuda_kernel_2d: block: \
[0,0,0], thread: [5,0,0] Assertion `t >= 0 && t < n_classes` failed.
RuntimeError: CUDA error: device-side assert triggered
CUDA kernel errors might be asynchronously reported at some other API call, so the \
stacktrace below might be incorrect.
"""

HOST_OOM_KILLED = "/bin/bash: line 1:  4242 Killed                  python train.py --bs 512\n"

NUMPY_MEMORY_ERROR = (
    "numpy.core._exceptions._ArrayMemoryError: Unable to allocate 74.5 GiB for an array "
    "with shape (100000, 100000) and data type float64\n"
)

DISK_QUOTA = """\
RuntimeError: [enforce fail at inline_container.cc:595] . unexpected pos 4096 vs 0
OSError: [Errno 122] Disk quota exceeded: '/home/alice/ckpt/step_4000.pt'
"""

DISK_FULL = "OSError: [Errno 28] No space left on device: '/tmp/torchinductor_alice/xy/cxy.py'\n"

NFS_STALE_HANDLE = """\
  File "/usr/local/lib/python3.10/dist-packages/PIL/Image.py", line 3247, in open
    fp = builtins.open(filename, "rb")
OSError: [Errno 116] Stale file handle: \
'/mnt/datasets/imagenet/train/n01440764/n01440764_10026.JPEG'
"""

CHECKPOINT_WRITE_FAILED = (
    "RuntimeError: [enforce fail at inline_container.cc:424] . "
    "PytorchStreamWriter failed writing file data/17: file write failed\n"
)

FUSE_MOUNT_GONE = (
    "OSError: [Errno 107] Transport endpoint is not connected: '/mnt/s3/corpus/shard-00042'\n"
)

XID_79 = """\
[Tue May  7 03:12:44 2024] NVRM: GPU at PCI:0000:3b:00: GPU-6f1c2a4e-8d1b-4a57-9a3f-0c2d1e8b7f10
[Tue May  7 03:12:44 2024] NVRM: GPU Board Serial Number: 1650923012345
[Tue May  7 03:12:45 2024] NVRM: Xid (PCI:0000:3b:00): 79, pid=23411, name=python, \
GPU has fallen off the bus.
[Tue May  7 03:12:45 2024] NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.
"""

XID_13 = (
    "[Tue May  7 03:12:45 2024] NVRM: Xid (PCI:0000:3b:00): 13, pid=4242, name=python, "
    "Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0): Out Of Range Address\n"
)

GPU_LOST = (
    "Unable to determine the device handle for GPU0000:3B:00.0: GPU is lost.  "
    "Reboot the system to recover this GPU\n"
)

ECC_ERROR = "RuntimeError: CUDA error: uncorrectable ECC error encountered\n"

DRIVER_MISMATCH = "Failed to initialize NVML: Driver/library version mismatch\n"

LIBCUDA_MISSING = (
    "ImportError: libcuda.so.1: cannot open shared object file: No such file or directory\n"
)

LAUNCH_FAILURE = """\
RuntimeError: CUDA error: unspecified launch failure
CUDA kernel errors might be asynchronously reported at some other API call, so the \
stacktrace below might be incorrect.
For debugging consider passing CUDA_LAUNCH_BLOCKING=1.
"""

ILLEGAL_MEMORY_ACCESS = "RuntimeError: CUDA error: an illegal memory access was encountered\n"

TORCHRUN_SEGFAULT = """\
Root Cause (first observed failure):
[0]:
  time      : 2024-05-07_03:12:45
  host      : gpu-node-17
  rank      : 3 (local_rank: 3)
  exitcode  : -11 (pid: 23411)
  error_file: <N/A>
  traceback : Signal 11 (SIGSEGV) received by PID 23411
"""

NCCL_WATCHDOG = """\
[rank3]:[E ProcessGroupNCCL.cpp:563] [Rank 3] Watchdog caught collective operation timeout: \
WorkNCCL(SeqNum=84211, OpType=ALLREDUCE, NumelIn=262144, NumelOut=262144, \
Timeout(ms)=600000) ran for 600045 milliseconds before timing out.
[rank3]:[E ProcessGroupNCCL.cpp:577] [Rank 3] Some NCCL operations have failed or timed out. \
Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on \
corrupted/incomplete data.
[rank3]:[E ProcessGroupNCCL.cpp:583] [Rank 3] To avoid data inconsistency, we are taking the \
entire process down.
terminate called after throwing an instance of 'c10::DistBackendError'
"""

NCCL_REMOTE_ERROR = """\
torch.distributed.DistBackendError: NCCL error in: \
../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, remote process exited or there was \
a network error, NCCL version 2.19.3
ncclRemoteError: A call failed possibly due to a network error or a remote process exiting \
prematurely.
Last error:
NET/IB : Got completion from peer 10.0.3.18<38233> with error 12, opcode 0, len 0, vendor err \
129 (Recv)
"""

NCCL_INVALID_USAGE = """\
torch.distributed.DistBackendError: NCCL error in: \
../torch/csrc/distributed/c10d/NCCLUtils.hpp:219, invalid usage (run with NCCL_DEBUG=WARN for \
details), NCCL version 2.19.3
ncclInvalidUsage: This usually reflects invalid usage of NCCL library.
Last error:
Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1b000
"""

RENDEZVOUS_TIMEOUT = """\
torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError
[E socket.cpp:957] [c10d] The client socket has timed out after 900s while trying to \
connect to (gpu-node-3, 29500).
"""

CONNECTION_RESET = "ConnectionResetError: [Errno 104] Connection reset by peer\n"


DEFAULT_RULE_CASES = [
    (1, SYNTAX_ERROR, "python-syntax-error", "user"),
    (1, INDENTATION_ERROR, "python-syntax-error", "user"),
    (1, MODULE_NOT_FOUND, "python-import-error", "user"),
    (1, IMPORT_ERROR, "python-import-error", "user"),
    (1, NAME_ERROR, "python-name-error", "user"),
    (2, ARGPARSE_UNRECOGNIZED, "bad-arguments", "user"),
    (1, ARGPARSE_REQUIRED, "bad-arguments", "user"),  # under torchrun: exit 1
    (2, CLICK_USAGE, "usage-error", "user"),
    (2, SCRIPT_NOT_FOUND, "script-not-found", "user"),
    (127, COMMAND_NOT_FOUND, "script-not-found", "user"),
    (127, "", "command-not-runnable", "user"),
    (126, "", "command-not-runnable", "user"),
    (1, FILE_NOT_FOUND, "file-not-found", "user"),
    (1, PERMISSION_DENIED, "permission-denied", "user"),
    (1, CUDA_OOM, "cuda-out-of-memory", "user"),
    (1, CUBLAS_ALLOC_FAILED, "cuda-out-of-memory", "user"),
    (1, DEVICE_SIDE_ASSERT, "cuda-device-side-assert", "user"),
    (137, HOST_OOM_KILLED, "host-out-of-memory", "user"),
    (1, NUMPY_MEMORY_ERROR, "python-memory-error", "user"),
    (1, NCCL_INVALID_USAGE, "nccl-invalid-usage", "user"),
    (1, DISK_QUOTA, "disk-quota-exceeded", "user"),
    (1, DISK_FULL, "disk-full", "infrastructure"),
    (1, NFS_STALE_HANDLE, "storage-io-error", "infrastructure"),
    (1, CHECKPOINT_WRITE_FAILED, "storage-io-error", "infrastructure"),
    (1, FUSE_MOUNT_GONE, "storage-io-error", "infrastructure"),
    (1, XID_79, "gpu-xid", "infrastructure"),
    (1, GPU_LOST, "gpu-lost", "infrastructure"),
    (1, ECC_ERROR, "gpu-ecc-error", "infrastructure"),
    (1, DRIVER_MISMATCH, "gpu-driver-unavailable", "infrastructure"),
    (1, LIBCUDA_MISSING, "gpu-driver-unavailable", "infrastructure"),
    (1, LAUNCH_FAILURE, "cuda-launch-failure", "infrastructure"),
    (1, NCCL_WATCHDOG, "nccl-error", "infrastructure"),
    (134, NCCL_WATCHDOG, "nccl-error", "infrastructure"),  # abort() after the watchdog
    (1, NCCL_REMOTE_ERROR, "nccl-error", "infrastructure"),
    (1, RENDEZVOUS_TIMEOUT, "network-error", "infrastructure"),
    (1, CONNECTION_RESET, "network-error", "infrastructure"),
    (1, ILLEGAL_MEMORY_ACCESS, "cuda-illegal-memory-access", "unknown"),
    (139, "", "segmentation-fault", "unknown"),
    (1, TORCHRUN_SEGFAULT, "segmentation-fault-reported", "unknown"),
]


@pytest.mark.parametrize(("exit_code", "log", "rule", "failure_class"), DEFAULT_RULE_CASES)
def test_default_rules_classify_realistic_logs(exit_code, log, rule, failure_class):
    classification = classify(exit_code, log)

    assert (classification.rule, classification.failure_class) == (rule, failure_class)
    assert f"({rule})" in classification.message
    assert "\n" not in classification.message


# What the Kubernetes backend reports as a worker's reason: the container's termination
# reason, the pod's reason or disruption, or why it never started (the start timeout).
CLUSTER_REASON_CASES = [
    (137, "epoch 3 step 120\n", "OOMKilled", "oom-killed", "user"),
    # The reason is a fact: an OOM kill beats the storage error it caused in the log.
    (137, NFS_STALE_HANDLE, "OOMKilled", "oom-killed", "user"),
    (1, CUDA_OOM, "Error", "cuda-out-of-memory", "user"),  # GPU memory: the log tells
    (137, "", "DisruptionTarget: TerminationByKubelet: The node was low on resource: memory.",
     "pod-disrupted", "infrastructure"),
    (None, "", "Evicted: The node had condition: [DiskPressure].", "pod-disrupted",
     "infrastructure"),
    (None, "", "OutOfnvidia.com/gpu: Pod was rejected: Node didn't have enough resource",
     "node-rejected-pod", "infrastructure"),
    (None, "", 'ErrImagePull: failed to pull and unpack image "nvcr.io/x:1": dial tcp '
     "10.0.0.9:443: i/o timeout; not running after 600 s", "image-registry-unreachable",
     "infrastructure"),
    (None, "", 'ImagePullBackOff: Back-off pulling image "pytorch/pytorch:9.9"; not running '
     "after 600 s", "image-pull-failed", "user"),
    (None, "", "InvalidImageName: couldn't parse image name \"Bad:Name\"", "image-pull-failed",
     "user"),
    (None, "", "Unschedulable: 0/4 nodes are available; not running after 600 s",
     "pod-not-started", "infrastructure"),
    (None, "", "ContainerCreating: not running after 600 s", "pod-not-started",
     "infrastructure"),
    (137, "", "DeadlineExceeded: Pod was active on the node longer than the specified deadline",
     "deadline-exceeded", "user"),
    (128, "", 'StartError: exec: "python": executable file not found in $PATH',
     "container-cannot-run", "user"),
    # A container the runtime could not start for want of the GPU driver is the node's.
    (128, "", "ContainerCannotRun: nvidia-container-cli: initialization error: load library "
     "failed: libnvidia-ml.so.1: Driver/library version mismatch", "gpu-driver-unavailable",
     "infrastructure"),
    # The local backend's runc could not make the container: the node's failure, though the
    # init ends with the shell's 127 (the command never ran).
    (127, "trainyard-init: the sandbox did not start (runc exited with 1)\n",
     "SandboxNotStarted: runc exited with 1 before the container ran", "sandbox-not-started",
     "infrastructure"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("exit_code", "log", "reason", "rule", "failure_class"), CLUSTER_REASON_CASES
)
def test_default_rules_classify_what_the_cluster_said(exit_code, log, reason, rule, failure_class):
    classification = classify(exit_code, log, reason=reason)

    assert (classification.rule, classification.failure_class) == (rule, failure_class)
    assert f"({rule})" in classification.message


def test_every_default_rule_has_a_case_above():
    cases = {case[2] for case in DEFAULT_RULE_CASES} | {case[3] for case in CLUSTER_REASON_CASES}
    assert {rule.name for rule in default_rules()} == cases


def test_host_and_gpu_out_of_memory_are_told_apart():
    host = classify(137, "", reason="OOMKilled")
    gpu = classify(1, CUDA_OOM, reason="Error")

    assert (host.failure_class, gpu.failure_class) == ("user", "user")
    assert host.rule != gpu.rule
    assert "host memory" in host.message and "GPU memory" in gpu.message
    assert retry_decision(host, retries_used=0, max_retries=3).retry is False


def test_a_generic_reason_adds_nothing_to_the_message():
    assert "the cluster" not in classify(1, "", reason="Error").message
    assert 'the cluster: "NodeLost2"' in classify(1, "", reason="NodeLost2").message


def test_message_says_what_matched_and_what_follows():
    classification = classify(1, SYNTAX_ERROR)

    assert classification.message == (
        "user error (python-syntax-error): the job's Python code does not parse; "
        "log: \"SyntaxError: '(' was never closed\""
    )


def test_long_matched_lines_are_shortened_around_the_match():
    classification = classify(1, CUDA_OOM)

    assert "CUDA out of memory" in classification.message
    assert "…" in classification.message
    assert len(classification.message) < 400


def test_an_xid_that_applications_cause_is_not_blamed_on_the_hardware():
    classification = classify(1, XID_13)

    assert (classification.failure_class, classification.rule) == ("user", "")


def test_first_matching_rule_wins():
    # A rank that ran out of memory takes its peers down with NCCL errors: the cause is
    # the out-of-memory error, which comes first in the defaults.
    assert classify(1, NCCL_WATCHDOG + CUDA_OOM).rule == "cuda-out-of-memory"
    assert classify(1, CUDA_OOM + NCCL_WATCHDOG).rule == "cuda-out-of-memory"
    # A dead mount makes an import fail; the storage error is the cause.
    assert classify(1, NFS_STALE_HANDLE + MODULE_NOT_FOUND).rule == "storage-io-error"
    # A quota makes the checkpoint write fail; the quota is the job's.
    assert classify(1, DISK_QUOTA + CHECKPOINT_WRITE_FAILED).rule == "disk-quota-exceeded"


def test_rule_order_in_a_file_decides():
    both_match = "CUDA out of memory\n"
    rules = parse_rules(
        """
        rules:
          - {name: first, class: infrastructure, patterns: ['out of memory']}
          - {name: second, class: user, patterns: ['CUDA out of memory']}
        """
    )

    assert classify(1, both_match, rules).rule == "first"
    assert classify(1, both_match, tuple(reversed(rules))).rule == "second"


@pytest.mark.parametrize(
    ("exit_code", "rule"),
    [(137, ""), (-9, ""), (139, "segmentation-fault"), (-11, "segmentation-fault"), (None, "")],
)
def test_a_signal_or_no_exit_code_without_a_log_is_unknown(exit_code, rule):
    classification = classify(exit_code, "")

    assert classification.rule == rule
    assert classification.failure_class == "unknown"


@pytest.mark.parametrize("exit_code", [1, 3, 128, 255])
def test_a_plain_exit_that_no_rule_explains_is_the_users(exit_code):
    classification = classify(exit_code, "epoch 3 step 1200 loss 2.31\n", reason="Error")

    assert classification == Classification(
        FailureClass.USER,
        "",
        f"user error: your command exited {exit_code} and its log shows no infrastructure fault",
    )


def test_sigkill_without_oom_evidence_is_not_blamed_on_the_user():
    assert classify(137, "epoch 3 step 1200 loss 2.31\n").failure_class == "unknown"
    assert classify(1, HOST_OOM_KILLED).rule == ""  # "Killed" needs SIGKILL


def test_no_exit_code_matches_patterns_only():
    assert classify(None, NCCL_WATCHDOG).rule == "nccl-error"
    assert classify(None, "").message.startswith("unknown cause: no exit code")


def test_unknown_when_nothing_matches_a_death_by_signal():
    log = "epoch 3 step 1200 loss 2.31\n"

    assert classify(143, log) == Classification(
        FailureClass.UNKNOWN,
        "",
        "unknown cause: exit code 143 (SIGTERM) and the log matched no rule",
    )
    # A reason the cluster gave that no rule knows is not blamed on the user either.
    assert classify(1, log, reason="NodeLost2").failure_class == "unknown"


def test_exit_code_zero_is_not_a_failure():
    assert classify(0, CUDA_OOM) is None


def test_colour_codes_and_carriage_returns_do_not_hide_a_match():
    log = "epoch 1: 100%|#####| 500/500\r\x1b[31mModuleNotFoundError: No module named 'timm'\x1b[0m"

    classification = classify(1, log)

    assert classification.rule == "python-import-error"
    assert "\x1b" not in classification.message


def test_classification_accepts_any_string_with_a_class_value():
    assert Classification("preemption", "preempted", "").failure_class is FailureClass.PREEMPTION
    with pytest.raises(ValueError):
        Classification("bogus", "", "")


def test_classes_and_rule_names_fit_the_job_model():
    # Model metadata only: no database.
    from backend.jobs.models import FailureClass as ModelFailureClass
    from backend.jobs.models import JobAttempt
    from jobmanager.retries import RULE_NAME_MAX_LENGTH

    assert [c.value for c in FailureClass] == [c.value for c in ModelFailureClass]
    assert JobAttempt._meta.get_field("failure_rule").max_length == RULE_NAME_MAX_LENGTH


def test_patterns_are_case_sensitive_unless_flagged():
    rules = parse_rules(
        """
        rules:
          - {name: exact, class: user, patterns: ['Out of Memory']}
          - {name: loose, class: infrastructure, patterns: ['out of memory'], ignore_case: true}
        """
    )

    assert classify(1, "Out of Memory", rules).rule == "exact"
    assert classify(1, "OUT OF MEMORY", rules).rule == "loose"


# ---- custom rule files ---------------------------------------------------------------


def test_a_custom_file_replaces_the_defaults(tmp_path, monkeypatch):
    rules_file = tmp_path / "rules.yaml"
    rules_file.write_text(
        """
rules:
  - name: spot-termination
    class: preemption
    exit_codes: [SIGTERM]
    patterns: ['spot instance termination notice']
    ignore_case: true
"""
    )
    monkeypatch.setenv("TRAINYARD_RETRY_RULES", str(rules_file))

    assert [rule.name for rule in load_rules()] == ["spot-termination"]
    assert classify(143, "Spot Instance Termination Notice received").rule == "spot-termination"
    assert classify(1, CUDA_OOM).rule == ""  # defaults replaced


def test_a_custom_file_extends_the_defaults(tmp_path, monkeypatch):
    rules_file = tmp_path / "rules.yaml"
    rules_file.write_text(
        """
extends_defaults: true
rules:
  - name: dataset-service-down
    class: infrastructure
    patterns: ['datasvc: 503 Service Unavailable']
  - name: segmentation-fault
    class: infrastructure
    exit_codes: [139]
"""
    )
    monkeypatch.setenv("TRAINYARD_RETRY_RULES", str(rules_file))

    names = [rule.name for rule in load_rules()]
    defaults = [rule.name for rule in default_rules()]
    assert names[0] == "dataset-service-down"  # new rules go first
    assert names[1:] == defaults  # an overriding rule keeps the default's place
    assert classify(1, "datasvc: 503 Service Unavailable").rule == "dataset-service-down"
    assert classify(139, "").failure_class == "infrastructure"
    assert classify(1, CUDA_OOM).rule == "cuda-out-of-memory"


def test_a_changed_custom_file_is_read_again(tmp_path, monkeypatch):
    rules_file = tmp_path / "rules.yaml"
    rules_file.write_text("rules: [{name: a, class: user, exit_codes: [3]}]\n")
    monkeypatch.setenv("TRAINYARD_RETRY_RULES", str(rules_file))
    assert classify(3, "").rule == "a"

    rules_file.write_text("rules: [{name: bee, class: user, exit_codes: [3]}]\n")

    assert classify(3, "").rule == "bee"


def test_a_missing_custom_file_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINYARD_RETRY_RULES", str(tmp_path / "nope.yaml"))

    with pytest.raises(ValueError, match=r"nope\.yaml.*cannot be read"):
        load_rules()


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ("rules: [", "not valid YAML"),
        ("- a\n- b\n", "expected a mapping with a 'rules' list"),
        ("rule: []\n", "unknown field 'rule'"),
        ("rules: {}\n", "'rules' must be a list"),
        ("extends_defaults: yes please\nrules: []\n", "'extends_defaults' must be true or false"),
        ("rules: [{class: user, exit_codes: [1]}]", "rule #1: field 'name' is missing"),
        ("rules: [{name: 'two words', class: user}]", "rule #1: field 'name': 'two words'"),
        ("rules: [{name: a, exit_codes: [1]}]", "rule 'a': field 'class' is missing"),
        (
            "rules: [{name: oom, class: usr, patterns: [x]}]",
            "rule 'oom': field 'class': unknown class 'usr' "
            "(expected one of user, infrastructure, preemption, unknown)",
        ),
        (
            "rules: [{name: nccl, class: user, patterns: ['NCCL (error']}]",
            "rule 'nccl': field 'patterns': bad regular expression 'NCCL (error': missing ),",
        ),
        ("rules: [{name: a, class: user, patterns: 'x'}]", "rule 'a': field 'patterns' must be"),
        ("rules: [{name: a, class: user, exit_codes: [0]}]", "rule 'a': field 'exit_codes': 0"),
        ("rules: [{name: a, class: user, exit_codes: [SIGFOO]}]", "'SIGFOO' is not an exit"),
        ("rules: [{name: a, class: user}]", "rule 'a': needs 'exit_codes', 'reasons' or 'pat"),
        ("rules: [{name: a, class: user, reasons: ['two words']}]", "'two words' is not a reas"),
        ("rules: [{name: a, class: user, exit_code: [1]}]", "rule 'a': unknown field 'exit_code'"),
        ("rules: [{name: a, class: user, exit_codes: [1], ignore_case: 1}]", "'ignore_case'"),
        (
            "rules: [{name: a, class: user, exit_codes: [1]}, {name: a, class: user, "
            "exit_codes: [2]}]",
            "rule 'a': field 'name': used twice",
        ),
    ],
)
def test_bad_rule_files_are_refused_clearly(document, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_rules(document, source="custom.yaml")


def test_bad_custom_file_names_the_file(tmp_path, monkeypatch):
    rules_file = tmp_path / "rules.yaml"
    rules_file.write_text("rules: [{name: oom, class: usr, patterns: [x]}]\n")
    monkeypatch.setenv("TRAINYARD_RETRY_RULES", str(rules_file))

    with pytest.raises(ValueError, match=r"rules\.yaml: rule 'oom': field 'class'"):
        classify(1, "x")


# ---- retry decisions -----------------------------------------------------------------

INFRA = Classification(FailureClass.INFRASTRUCTURE, "nccl-error", "")
UNKNOWN = Classification(FailureClass.UNKNOWN, "", "")
USER = Classification(FailureClass.USER, "cuda-out-of-memory", "")
PREEMPTED = Classification(FailureClass.PREEMPTION, "preempted", "")


def test_user_errors_are_not_retried():
    decision = retry_decision(USER, retries_used=0, max_retries=5)

    assert decision == RetryDecision(
        False,
        False,
        0.0,
        "user error (cuda-out-of-memory); not retried: a retry would repeat it "
        "(retry_on: any retries user errors too)",
    )


def test_user_errors_are_retried_when_the_job_retries_on_any_failure():
    exited = classify(3, "")
    decisions = [retry_decision(exited, used, 2, retry_on="any") for used in range(3)]

    assert [(d.retry, d.spends_retry) for d in decisions] == [
        (True, True), (True, True), (False, False),
    ]  # fmt: skip
    assert decisions[0].reason == (
        "user error: your command exited 3 and its log shows no infrastructure fault; "
        "retry 1 of 2 in 30 s"
    )
    assert decisions[2].reason.endswith("; not retried: all 2 used")


def test_the_reason_is_one_line_saying_what_happened_and_what_follows():
    decision = retry_decision(classify(3, ""), retries_used=0, max_retries=3)

    assert decision.reason == (
        "user error: your command exited 3 and its log shows no infrastructure fault; "
        "not retried: a retry would repeat it (retry_on: any retries user errors too)"
    )
    assert "\n" not in decision.reason and decision.reason.count("retried") == 1


@pytest.mark.parametrize("classification", [INFRA, UNKNOWN])
def test_backoff_doubles_and_is_capped(classification):
    backoffs = [
        retry_decision(
            classification, used, 10, base_backoff_seconds=30, max_backoff_seconds=300
        ).backoff_seconds
        for used in range(6)
    ]

    assert backoffs == [30, 60, 120, 240, 300, 300]


def test_retries_spend_one_each_until_max_retries():
    decisions = [retry_decision(INFRA, used, max_retries=3) for used in range(5)]

    assert [d.retry for d in decisions] == [True, True, True, False, False]
    assert [d.spends_retry for d in decisions] == [True, True, True, False, False]
    assert decisions[2].reason == "infrastructure failure (nccl-error); retry 3 of 3 in 120 s"
    assert decisions[3].reason == "infrastructure failure (nccl-error); not retried: all 3 used"


def test_no_retries_allowed():
    decision = retry_decision(UNKNOWN, retries_used=0, max_retries=0)

    assert not decision.retry
    assert decision.reason == "unknown cause; not retried: the job allows no retries"


def test_huge_retry_counts_do_not_overflow():
    assert retry_decision(INFRA, 5000, 10_000).backoff_seconds == 1800


@pytest.mark.parametrize("retries_used", [0, 3, 10])
def test_preemption_requeues_at_once_and_never_spends_a_retry(retries_used):
    decision = retry_decision(PREEMPTED, retries_used, max_retries=3)

    assert decision == RetryDecision(
        True, False, 0.0, "preemption (preempted); requeued without spending a retry"
    )


def test_system_requeue_never_spends_a_retry():
    decision = system_requeue("the cluster backend lost the job (node lost)")

    assert decision == RetryDecision(
        True,
        False,
        0.0,
        "the cluster backend lost the job (node lost); requeued without spending a retry",
    )


def test_negative_counts_are_refused():
    with pytest.raises(ValueError):
        retry_decision(INFRA, -1, 3)


# ---- log tails -----------------------------------------------------------------------


def test_read_log_tail_returns_only_the_end_of_a_big_file(tmp_path):
    log = tmp_path / "worker-0.log"
    with log.open("wb") as out:
        for step in range(200_000):  # about 6 MB
            out.write(f"step {step:07d} loss 2.3456\n".encode())
        out.write(CUDA_OOM.encode())

    tail = read_log_tail(log, max_bytes=4096)

    assert len(tail.encode()) <= 4096
    assert tail.endswith(CUDA_OOM)
    assert tail.startswith("step ")  # the line cut by the window is dropped
    assert classify(1, tail).rule == "cuda-out-of-memory"


def test_read_log_tail_of_a_small_file_is_all_of_it(tmp_path):
    log = tmp_path / "worker-0.log"
    log.write_text(SYNTAX_ERROR)

    assert read_log_tail(log) == SYNTAX_ERROR


def test_read_log_tail_of_a_missing_file_is_empty(tmp_path):
    assert read_log_tail(tmp_path / "never-written.log") == ""
    assert read_log_tail(tmp_path / "no-dir" / "worker-0.log") == ""


def test_read_log_tail_tolerates_invalid_utf8(tmp_path):
    log = tmp_path / "worker-0.log"
    log.write_bytes(b"step 1 loss 2.3\n\xff\xfe binary junk\nNCCL WARN Net : Connection closed\n")

    tail = read_log_tail(log)

    assert "\ufffd\ufffd binary junk\n" in tail
    assert classify(1, tail).rule == "nccl-error"


def test_read_log_tail_tolerates_a_character_cut_by_the_window(tmp_path):
    log = tmp_path / "worker-0.log"
    log.write_bytes("é".encode() * 10)  # two bytes each: the last 5 bytes start mid-character

    assert read_log_tail(log, max_bytes=5) == "\ufffdéé"


def test_read_log_tail_keeps_a_single_long_line(tmp_path):
    log = tmp_path / "worker-0.log"
    log.write_text("x" * 10_000 + " Stale file handle")

    assert read_log_tail(log, max_bytes=100).endswith("Stale file handle")
