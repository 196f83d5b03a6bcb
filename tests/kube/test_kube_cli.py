"""`ringleader kube ...`: what a user types, the exit codes and one-line errors."""

from __future__ import annotations

import yaml

from kube.fakeapi import FakeApiServer
from kube.test_agent_contract import bare_node
from ringleader.cli.main import main
from ringleader.engines.kubernetes import names


def test_manifests_print_the_install(capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["kube", "manifests", "--image", "registry.example/ringleader:1", "--replicas", "3"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    assert deployment["spec"]["replicas"] == 3
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.example/ringleader:1"
    config = next(d for d in docs if d["kind"] == "ConfigMap")
    assert yaml.safe_load(config["data"]["scheduler.yaml"]).keys() == {"leaseSeconds", "metricsPort", "namespace",
                                                                       "bindThreads", "gpuDelivery"}  # fmt: skip


def test_agent_once_publishes_and_bad_input_is_one_line(fake: FakeApiServer, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    fake.put("nodes", bare_node("gpu-0"))
    monkeypatch.delenv("NODE_NAME", raising=False)
    assert main(["kube", "agent", "--server", fake.url, "--once"]) == 2
    assert capsys.readouterr().err.startswith("error: no node name. To fix: give --node NAME")
    assert main(["kube", "agent", "--server", fake.url, "--node", "gpu-0", "--interval", "0"]) == 2
    # This machine has no GPU, like the node as kubelet registered it: nothing to write.
    assert main(["kube", "agent", "--server", fake.url, "--node", "gpu-0", "--once"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("node gpu-0: 0 GPU(s)") and out.rstrip().endswith("unchanged")
    assert not fake.calls("patch")
    # A node that advertised GPUs before loses them: the agent says 0.
    fake.get("nodes", "gpu-0")["status"]["capacity"][names.GPU_RESOURCE] = "8"
    assert main(["kube", "agent", "--server", fake.url, "--node", "gpu-0", "--once"]) == 0
    assert capsys.readouterr().out.rstrip().endswith("published")
    assert fake.get("nodes", "gpu-0")["status"]["capacity"][names.GPU_RESOURCE] == "0"
    assert main(["kube", "agent", "--server", fake.url, "--node", "missing", "--once"]) == 1


def test_scheduler_config_errors(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / "scheduler.yaml"
    bad.write_text("leaseSeconds: 15\nleaderElect: true\n")
    assert main(["kube", "scheduler", "--config", str(bad)]) == 2
    assert "unknown key 'leaderElect'" in capsys.readouterr().err
    bad.write_text("leaseSeconds: -1\n")
    assert main(["kube", "scheduler", "--config", str(bad)]) == 2
    assert main(["kube", "scheduler", "--config", str(tmp_path / "absent.yaml")]) == 2
    assert "cannot read config" in capsys.readouterr().err
    bad.write_text("networkLevelKeys: example.com/rack\n")  # one key, not a list of them
    assert main(["kube", "scheduler", "--config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "networkLevelKeys must be a list of node label keys" in err and len(err.strip().splitlines()) == 1
    bad.write_text("networkHyperNodes: volcano\n")
    assert main(["kube", "scheduler", "--config", str(bad)]) == 2
    assert "networkHyperNodes must be true or false" in capsys.readouterr().err


def test_manifests_choose_the_gpu_delivery(capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["kube", "manifests", "--gpu-delivery", "dra", "--runtime-class", "none"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    cluster = next(d for d in docs if d["metadata"]["name"] == names.CLUSTER_CONFIG and d["kind"] == "ConfigMap")
    assert cluster["data"] == {"gpuDelivery": "dra", "runtimeClass": "none"}
    assert [d["metadata"]["name"] for d in docs if d["kind"] == "ValidatingAdmissionPolicy"] == [
        "ringleader-gpu-env", "ringleader-agent-own-node", "ringleader-scheduler-pins-only",
        "ringleader-podgroup-counters", "ringleader-scheduler-cordons-only"]  # NVIDIA_* guarded
    # Switching an install's delivery is `kubectl apply` of the other install: it replaces every
    # object by name, so both installs name the same objects and none of the other is left in force.
    assert main(["kube", "manifests", "--gpu-delivery", "env", "--runtime-class", "none"]) == 0
    env = list(yaml.safe_load_all(capsys.readouterr().out))
    assert {(d["kind"], d["metadata"]["name"]) for d in env} == {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert main(["kube", "manifests", "--trusted-namespace", "ml-infra"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    binding = next(d for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding"
                   and d["metadata"]["name"] == "ringleader-gpu-env")  # fmt: skip
    assert "ml-infra" in binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"][0]["values"]
    assert main(["kube", "manifests", "--runtime-class", "Bad_Name"]) == 2
    assert capsys.readouterr().err.startswith("error: runtime class 'Bad_Name' is not a valid name")


def test_kubernetes_options_are_refused_by_other_engines_in_one_line(tmp_path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("RINGLEADER_HOME", str(tmp_path / "home"))
    for extra in (["--dry-run"], []):
        for option in (["--cpu", "4"], ["-n", "team-a"], ["--toleration", "all"], ["--priority-class", "high"]):
            code = main(["submit", "mpi", "--engine", "embedded", "--name", "x", *option, *extra, "true"])
            err = capsys.readouterr().err
            assert code == 2 and err.count("\n") == 1, err
            flag = "-n/--namespace" if option[0] == "-n" else option[0]
            assert f"{flag} is not supported by the embedded engine" in err
    assert main(["list", "--engine", "embedded", "-o", "json"]) == 0
    assert '"x"' not in capsys.readouterr().out  # nothing was submitted


def test_gpu_variables_are_refused_on_kubernetes(capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("RINGLEADER_KUBE_SERVER", "http://127.0.0.1:9")
    code = main(["submit", "mpi", "--engine", "kubernetes", "--name", "x", "--dry-run", "-e",
                 "NVIDIA_VISIBLE_DEVICES=all", "true"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: -e NVIDIA_VISIBLE_DEVICES is not allowed on the kubernetes engine")


def test_agent_check_reports_what_it_finds_and_touches_no_api(capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The agent's self-check, as an image is checked on a node before it is deployed: it needs
    no API server and no node name. On a machine without GPUs it says why, and fails."""
    monkeypatch.delenv("NODE_NAME", raising=False)
    monkeypatch.setenv("KUBECONFIG", "/nonexistent/kubeconfig")
    assert main(["kube", "agent", "--check"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: no GPU found here (") and "To fix:" in err and len(err.splitlines()) == 1

    from ringleader.cli import kube
    from ringleader.engines.kubernetes.agent import Found
    from ringleader.topology import parse_topo_text

    quad = parse_topo_text("\tGPU0\tGPU1\nGPU0\t X \tNV2\nGPU1\tNV2\t X \n", source="test")
    monkeypatch.setattr(kube, "find_topology", lambda: Found(quad, "nvidia-smi", ("GPU-a", "GPU-b"), 0))
    assert main(["kube", "agent", "--check"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "2 GPU(s) found by nvidia-smi; 0 unhealthy; UUIDs known"
    assert f"{names.TOPOLOGY_ANNOTATION}: " in out
