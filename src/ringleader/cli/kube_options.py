"""arena's Kubernetes-only submit options (``JobSpec.kube``; every other engine refuses them).

Apart from `ringleader kube` so that `submit` and the read commands do not load the Kubernetes
engine to parse them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click

from ringleader.errors import UsageError
from ringleader.jobs.spec import TENSORBOARD_IMAGE, TRAINING_LOGDIR, KubeOptions

F = TypeVar("F", bound=Callable[..., Any])

_KUBE_OPTIONS = (
    click.option("--cpu", "kube_cpu", default=None, help="[kubernetes] CPU request per worker (4, 500m; default 1)."),
    click.option("--memory", "kube_memory", default=None, help="[kubernetes] Memory request per worker (default 2Gi)."),
    click.option("--selector", "kube_selector", multiple=True, metavar="KEY=VALUE",
                 help="[kubernetes] Run on nodes with this label (repeatable)."),
    click.option("--toleration", "kube_tolerations", multiple=True, metavar="KEY[=VALUE][:EFFECT]|all",
                 help="[kubernetes] Tolerate this taint (repeatable)."),
    click.option("--image-pull-secret", "kube_pull_secrets", multiple=True, metavar="NAME",
                 help="[kubernetes] Secret to pull the image with (repeatable)."),
    click.option("-l", "--label", "kube_labels", multiple=True, metavar="KEY=VALUE",
                 help="[kubernetes] Label on the MPIJob and its pods (repeatable)."),
    click.option("-a", "--annotation", "kube_annotations", multiple=True, metavar="KEY=VALUE",
                 help="[kubernetes] Annotation on the MPIJob and its pods (repeatable)."),
    click.option("-p", "--priority-class", "kube_priority_class", default=None, metavar="NAME",
                 help="[kubernetes] The pods' PriorityClass (arena's -p/--priority; here --priority is "
                      "ringleader's queue order)."),
    click.option("--retry", "kube_retry", type=int, default=None, help="[kubernetes] Retries (backoffLimit)."),
    click.option("--data-dir", "kube_data_dirs", multiple=True, metavar="HOST_PATH:CONTAINER_PATH",
                 help="[kubernetes] Mount a node's directory into every pod (repeatable)."),
    click.option("--tensorboard", "kube_tensorboard", is_flag=True, default=False,
                 help="[kubernetes] Start TensorBoard beside the job (a Deployment and a NodePort Service, "
                      "deleted with it); `get` shows its address."),
    click.option("--tensorboard-image", "kube_tensorboard_image", default=None, metavar="IMAGE",
                 help=f"[kubernetes] TensorBoard's image (default {TENSORBOARD_IMAGE})."),
    click.option("--logdir", "kube_logdir", default=None, metavar="PATH|URL",
                 help=f"[kubernetes] Where the job writes its summaries and TensorBoard reads them (default "
                      f"{TRAINING_LOGDIR})."),
    click.option("--sync-mode", "kube_sync_mode", default=None, metavar="git|rsync",
                 help="[kubernetes] Fetch the code into WORKING_DIR/code before the job starts (arena's code sync)."),
    click.option("--sync-source", "kube_sync_source", default=None, metavar="URL",
                 help="[kubernetes] The code's git repository, or rsync source (HOST::MODULE/PATH)."),
    click.option("--sync-image", "kube_sync_image", default=None, metavar="IMAGE",
                 help="[kubernetes] The code sync's image (default: git-sync or rsync, as arena's)."),
)


def kube_submit_options(f: F) -> F:
    for option in reversed(_KUBE_OPTIONS):
        f = option(f)
    return f


def _pairs(values: Sequence[str], flag: str) -> tuple[tuple[str, str], ...]:
    out = []
    for text in values:
        key, sep, value = text.partition("=")
        if not sep or not key:
            raise UsageError(f"{flag} {text!r} is not KEY=VALUE", f"write {flag} KEY=VALUE")
        out.append((key, value))
    return tuple(out)


def read_kube_options(given: dict[str, Any]) -> KubeOptions | None:
    """The KubeOptions of a submit's ``kube_*`` arguments; None when none was given."""
    opts = KubeOptions(
        cpu=given["kube_cpu"], memory=given["kube_memory"],
        selector=_pairs(given["kube_selector"], "--selector"), tolerations=tuple(given["kube_tolerations"]),
        image_pull_secrets=tuple(given["kube_pull_secrets"]), labels=_pairs(given["kube_labels"], "--label"),
        annotations=_pairs(given["kube_annotations"], "--annotation"), priority_class=given["kube_priority_class"],
        retry=given["kube_retry"], data_dirs=tuple(given["kube_data_dirs"]),
        tensorboard=given["kube_tensorboard"], tensorboard_image=given["kube_tensorboard_image"],
        logdir=given["kube_logdir"], sync_mode=given["kube_sync_mode"], sync_source=given["kube_sync_source"],
        sync_image=given["kube_sync_image"],
    )  # fmt: skip
    return opts if opts.given() else None
