#!/usr/bin/env python3
"""Renders deploy/k8s (base and every overlay) offline and checks what a deployment relies on.

  k8s_render_test.py REPO_ROOT               check base, overlays/cpu-demo and overlays/gpu
  k8s_render_test.py --self-test REPO_ROOT   show that broken manifests are reported

No cluster and no PyYAML: `kubectl kustomize DIR` renders the YAML, then
`kubectl annotate --local -f - MARKER=1 -o json` turns each object into JSON without contacting
any API server (KUBECONFIG points at a file that does not exist, so a server could not be
reached even by mistake). `kubectl create --dry-run=client` is no use here: it needs the
server's discovery API to map kinds, so it fails offline. The marker annotation is removed again
after parsing. $KUBECTL overrides the kubectl binary.
"""
import copy
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

KUBECTL = os.environ.get("KUBECTL", "kubectl")
if shutil.which(KUBECTL) is None:
    sys.exit("k8s_render_test: kubectl not found (%r): the manifests are rendered with `kubectl kustomize` "
             "(kubectl v1.27+ with kustomize v5); install it or set KUBECTL" % KUBECTL)
MARKER = "rdattn.test/rendered"
NAMESPACE = "rdattn"
COORD_GRPC, COORD_METRICS, WORKER_METRICS = 50051, 9401, 9402
CORE_API = re.compile(r"^(v1|apps/v1|batch/v1|policy/v1|networking\.k8s\.io/v1|rbac\.authorization\.k8s\.io/v1)$")
OVERLAYS = {  # directory -> (image of every rdattn container, GPU overlay?)
    "base": ("rdattn-image", False),
    "overlays/cpu-demo": ("rdattn/rdattn-cpu:0.1.0", False),
    "overlays/gpu": ("rdattn/rdattn-cuda:0.1.0", True),
}


# ----------------------------------------------------------------------------- rendering
def render(kdir):
    env = dict(os.environ)
    with tempfile.TemporaryDirectory() as tmp:
        env["KUBECONFIG"] = os.path.join(tmp, "no-such-kubeconfig")
        yml = subprocess.run([KUBECTL, "kustomize", kdir], env=env, check=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True).stdout
        js = subprocess.run([KUBECTL, "annotate", "--local", "-f", "-", MARKER + "=1", "-o", "json"],
                            env=env, input=yml, check=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True).stdout
    objs, dec, i = [], json.JSONDecoder(), 0
    while True:
        while i < len(js) and js[i].isspace():
            i += 1
        if i >= len(js):
            break
        obj, i = dec.raw_decode(js, i)
        items = obj["items"] if obj.get("kind") == "List" else [obj]
        for o in items:
            ann = o["metadata"].get("annotations", {})
            ann.pop(MARKER, None)
            if not ann:
                o["metadata"].pop("annotations", None)
            objs.append(o)
    docs = yml.count("\nkind: ") + yml.startswith("kind: ")
    if len(objs) != docs:
        raise RuntimeError("%s: kustomize gave %d documents, JSON %d" % (kdir, docs, len(objs)))
    return objs


# ----------------------------------------------------------------------------- helpers
def find(objs, kind, name=None):
    return [o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]


def one(objs, kinds, name, problems):
    hits = [o for o in objs if o["kind"] in kinds and o["metadata"]["name"] == name]
    if len(hits) != 1:
        problems.append("expected one %s %s, found %d" % ("/".join(kinds), name, len(hits)))
        return None
    return hits[0]


def expand(s, env):
    """Kubernetes' $(VAR) expansion in command/args (value entries only; $$ escapes)."""
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                  lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), s)


def flags(container):
    env = {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
    argv = [expand(a, env) for a in container.get("command", []) + container.get("args", [])]
    out = {}
    for i, a in enumerate(argv):
        if a.startswith("--") and "=" in a:
            k, v = a[2:].split("=", 1)
            out[k.replace("_", "-")] = v
        elif a.startswith("--") and i + 1 < len(argv) and not argv[i + 1].startswith("-"):
            out[a[2:].replace("_", "-")] = argv[i + 1]
    return out


def port_of(addr):
    return int(addr.rsplit(":", 1)[1]) if addr and ":" in addr else None


def container(pod_spec, name):
    for c in pod_spec.get("containers", []):
        if c["name"] == name:
            return c
    return None


def mount_for(pod_spec, c, path):
    """The (volume, mount) whose mountPath contains path (longest match), or (None, None)."""
    best = (None, None)
    for m in c.get("volumeMounts", []):
        mp = m["mountPath"].rstrip("/")
        if path == mp or path.startswith(mp + "/"):
            if best[1] is None or len(mp) > len(best[1]["mountPath"].rstrip("/")):
                vol = next((v for v in pod_spec.get("volumes", []) if v["name"] == m["name"]), None)
                best = (vol, m)
    return best


def pvc_of(objs, vol):
    if vol and "persistentVolumeClaim" in vol:
        hits = find(objs, "PersistentVolumeClaim", vol["persistentVolumeClaim"]["claimName"])
        return hits[0] if hits else None
    return None


def container_ports(c):
    return {p["containerPort"]: p.get("name") for p in c.get("ports", [])}


def gpu_limit(c):
    return c.get("resources", {}).get("limits", {}).get("nvidia.com/gpu")


def all_containers(o):
    specs = []
    if o["kind"] in ("Deployment", "StatefulSet", "DaemonSet", "Job"):
        specs.append(o["spec"]["template"]["spec"])
    if o["kind"] == "MPIJob":
        specs += [r["template"]["spec"] for r in o["spec"]["mpiReplicaSpecs"].values()]
    return [c for s in specs for c in s.get("initContainers", []) + s.get("containers", [])]


def labels_match(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


# ----------------------------------------------------------------------------- checks
def check_secret_file(objs, pod_spec, c, path, what, problems):
    vol, m = mount_for(pod_spec, c, path)
    if not vol or "secret" not in vol:
        problems.append("%s %s is not on a Secret volume mount" % (what, path))
        return
    sec = find(objs, "Secret", vol["secret"]["secretName"])
    if not sec:
        problems.append("%s: Secret %s is not in the output" % (what, vol["secret"]["secretName"]))
        return
    rel = path[len(m["mountPath"].rstrip("/")) + 1:]
    items = vol["secret"].get("items")
    key = next((i["key"] for i in items if i["path"] == rel), None) if items else rel
    if key is None or key not in sec[0].get("data", {}) and key not in sec[0].get("stringData", {}):
        problems.append("%s %s: no key of Secret %s is mounted there" % (what, path, sec[0]["metadata"]["name"]))


def check_scrape(tmpl, port, what, problems):
    ann = tmpl["metadata"].get("annotations", {})
    if ann.get("prometheus.io/scrape") != "true":
        problems.append("%s: pod template lacks prometheus.io/scrape: \"true\"" % what)
    if ann.get("prometheus.io/port") != str(port):
        problems.append("%s: prometheus.io/port is %r, want \"%d\"" % (what, ann.get("prometheus.io/port"), port))
    if ann.get("prometheus.io/path") != "/metrics":
        problems.append("%s: prometheus.io/path is %r, want /metrics" % (what, ann.get("prometheus.io/path")))


def check_service(objs, name, pod_labels, c, want_ports, problems):
    svc = one(objs, ["Service"], name, problems)
    if not svc:
        return
    if not labels_match(svc["spec"].get("selector"), pod_labels):
        problems.append("Service %s: selector %s does not select the pods" % (name, svc["spec"].get("selector")))
    cports = container_ports(c)
    by_name = {p.get("name"): p for p in svc["spec"]["ports"]}
    for pname, port in want_ports.items():
        p = by_name.get(pname)
        if not p or p["port"] != port:
            problems.append("Service %s: no port %s = %d" % (name, pname, port))
            continue
        tp = p.get("targetPort", p["port"])
        if (isinstance(tp, int) and tp not in cports) or (isinstance(tp, str) and tp not in cports.values()):
            problems.append("Service %s: port %s targets %r, which the container does not expose" % (name, pname, tp))


def check_coordinator(objs, image, problems):
    dep = one(objs, ["Deployment"], "rdattn-coordinator", problems)
    if not dep:
        return
    if dep["spec"].get("replicas") != 1:
        problems.append("coordinator Deployment: replicas %r, want 1 (one SQLite writer)" % dep["spec"].get("replicas"))
    if dep["spec"].get("strategy", {}).get("type") != "Recreate":
        problems.append("coordinator Deployment: strategy %r, want Recreate" % dep["spec"].get("strategy", {}).get("type"))
    tmpl = dep["spec"]["template"]
    ps = tmpl["spec"]
    c = container(ps, "coordinator")
    if not c:
        problems.append("coordinator Deployment: no container named coordinator")
        return
    f = flags(c)
    ports = container_ports(c)
    if port_of(f.get("listen")) != COORD_GRPC:
        problems.append("coordinator: --listen %r, want port %d" % (f.get("listen"), COORD_GRPC))
    if port_of(f.get("metrics-listen")) != COORD_METRICS:
        problems.append("coordinator: --metrics-listen %r, want port %d" % (f.get("metrics-listen"), COORD_METRICS))
    for p in (COORD_GRPC, COORD_METRICS):
        if p not in ports:
            problems.append("coordinator: containerPort %d missing" % p)
    for probe in ("readinessProbe", "livenessProbe"):
        pr = c.get(probe)
        if not pr or "grpc" not in pr:
            problems.append("coordinator: no grpc %s" % probe)
        elif pr["grpc"].get("port") != COORD_GRPC:
            problems.append("coordinator: %s grpc port %r, want %d" % (probe, pr["grpc"].get("port"), COORD_GRPC))
    db = f.get("db", "")
    vol, _ = mount_for(ps, c, db)
    if not db.startswith("/") or pvc_of(objs, vol) is None:
        problems.append("coordinator: --db %r is not on a mounted PersistentVolumeClaim" % db)
    elif "ReadWriteOnce" not in pvc_of(objs, vol)["spec"].get("accessModes", []):
        problems.append("coordinator: the --db claim is not ReadWriteOnce")
    if not f.get("tokens-file"):
        problems.append("coordinator: no --tokens-file (authentication would be off)")
    else:
        check_secret_file(objs, ps, c, f["tokens-file"], "coordinator --tokens-file", problems)
    sc = c.get("securityContext", {})
    if not (ps.get("securityContext", {}).get("runAsNonRoot") or sc.get("runAsNonRoot")):
        problems.append("coordinator: not runAsNonRoot")
    if not sc.get("readOnlyRootFilesystem"):
        problems.append("coordinator: root filesystem is writable")
    check_scrape(tmpl, COORD_METRICS, "coordinator", problems)
    check_service(objs, "rdattn-coordinator", tmpl["metadata"]["labels"], c,
                  {"grpc": COORD_GRPC, "metrics": COORD_METRICS}, problems)


def check_worker(objs, gpu, problems):
    w = one(objs, ["StatefulSet", "DaemonSet"], "rdattn-worker", problems)
    if not w:
        return
    tmpl = w["spec"]["template"]
    ps = tmpl["spec"]
    c = container(ps, "worker")
    if not c:
        problems.append("worker: no container named worker")
        return
    f = flags(c)
    kind, slots, lim = f.get("kind"), f.get("slots"), gpu_limit(c)
    if gpu:
        if kind != "gpu":
            problems.append("worker: --kind %r, want gpu" % kind)
        if lim is None:
            problems.append("worker: no nvidia.com/gpu limit in the GPU overlay")
        elif str(lim) != str(slots):
            problems.append("worker: --slots %r but nvidia.com/gpu limit %r" % (slots, lim))
    else:
        if kind not in (None, "cpu"):
            problems.append("worker: --kind %r on a CPU deployment" % kind)
        res = c.get("resources", {})
        if "nvidia.com/gpu" in res.get("limits", {}) or "nvidia.com/gpu" in res.get("requests", {}):
            problems.append("worker: requests nvidia.com/gpu on a CPU deployment")
        if not (slots or "1").isdigit() or int(slots or "1") < 1:
            problems.append("worker: --slots %r is not a positive number" % slots)
    coord = f.get("coordinator", "")
    host, _, port = coord.rpartition(":")
    parts = host.split(".")
    svc = find(objs, "Service", parts[0])
    if not svc:
        problems.append("worker: --coordinator %r names no Service" % coord)
    else:
        if len(parts) > 1 and parts[1] != svc[0]["metadata"].get("namespace"):
            problems.append("worker: --coordinator %r names another namespace" % coord)
        if not port.isdigit() or int(port) not in {p["port"] for p in svc[0]["spec"]["ports"]}:
            problems.append("worker: --coordinator %r: port not served by Service %s" % (coord, parts[0]))
        if int(port or 0) != COORD_GRPC:
            problems.append("worker: --coordinator %r, want port %d" % (coord, COORD_GRPC))
    root = f.get("checkpoint-root", "")
    vol, _ = mount_for(ps, c, root)
    pvc = pvc_of(objs, vol)
    if not root or pvc is None:
        problems.append("worker: --checkpoint-root %r is not on a mounted PersistentVolumeClaim" % root)
    elif "ReadWriteMany" not in pvc["spec"].get("accessModes", []):
        problems.append("worker: the checkpoint claim %s is not ReadWriteMany" % pvc["metadata"]["name"])
    wd = f.get("workdir", "")
    vol, _ = mount_for(ps, c, wd)
    if not vol or "emptyDir" not in vol:
        problems.append("worker: --workdir %r is not on a node-local emptyDir" % wd)
    if not f.get("token-file"):
        problems.append("worker: no --token-file")
    else:
        check_secret_file(objs, ps, c, f["token-file"], "worker --token-file", problems)
    if port_of(f.get("metrics-listen")) != WORKER_METRICS or WORKER_METRICS not in container_ports(c):
        problems.append("worker: metrics not served on %d (--metrics-listen %r)" % (WORKER_METRICS, f.get("metrics-listen")))
    grace = ps.get("terminationGracePeriodSeconds", 30)
    stop = float(f.get("stop-grace", 30))
    if grace < stop + 60:
        problems.append("worker: terminationGracePeriodSeconds %s < --stop-grace %s + 60 s (relay, CompleteJob)" % (grace, stop))
    check_scrape(tmpl, WORKER_METRICS, "worker", problems)
    check_service(objs, "rdattn-worker", tmpl["metadata"]["labels"], c, {"metrics": WORKER_METRICS}, problems)


def check_mpijob(objs, problems):
    jobs = find(objs, "MPIJob")
    if len(jobs) != 1:
        problems.append("gpu overlay: expected one MPIJob, found %d" % len(jobs))
        return
    j = jobs[0]
    if j["apiVersion"] != "kubeflow.org/v2beta1":
        problems.append("MPIJob: apiVersion %s, want kubeflow.org/v2beta1" % j["apiVersion"])
    specs = j["spec"].get("mpiReplicaSpecs", {})
    la, wo = specs.get("Launcher"), specs.get("Worker")
    if not la or la.get("replicas") != 1:
        problems.append("MPIJob: Launcher replicas must be 1")
    if not wo or not wo.get("replicas"):
        problems.append("MPIJob: no Worker replicas")
        return
    slots = j["spec"].get("slotsPerWorker")
    wc = wo["template"]["spec"]["containers"][0]
    if gpu_limit(wc) is None or str(gpu_limit(wc)) != str(slots):
        problems.append("MPIJob: Worker nvidia.com/gpu limit %r != slotsPerWorker %r" % (gpu_limit(wc), slots))
    if not la:
        return
    lps = la["template"]["spec"]
    lc = lps["containers"][0]
    argv = lc.get("command", []) + lc.get("args", [])
    if not argv or os.path.basename(argv[0]) != "mpirun":
        problems.append("MPIJob: the launcher does not run mpirun")
        return
    np_ = None
    for i, a in enumerate(argv):
        if a in ("-np", "-n", "--np") and i + 1 < len(argv):
            np_ = int(argv[i + 1])
    if np_ != wo["replicas"] * (slots or 1):
        problems.append("MPIJob: mpirun -np %r != Worker replicas %d x slotsPerWorker %r" % (np_, wo["replicas"], slots))
    try:
        t = argv.index("rdattn-train")
        if argv[t + 1] != "train":
            raise ValueError
    except (ValueError, IndexError):
        problems.append("MPIJob: mpirun does not start `rdattn-train train`")
        return
    env = {e["name"] for e in lc.get("env", [])}
    exported = {argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "-x"}
    for v in ("NCCL_DEBUG", "NCCL_SOCKET_IFNAME"):
        if v not in env or v not in exported:
            problems.append("MPIJob: %s not set on the launcher and exported with -x" % v)
    job = argv[argv.index("--job") + 1] if "--job" in argv else ""
    vol, m = mount_for(lps, lc, job)
    if not vol or "configMap" not in vol:
        problems.append("MPIJob: --job %r is not on a ConfigMap mount" % job)
        return
    cm = find(objs, "ConfigMap", vol["configMap"]["name"])
    key = job[len(m["mountPath"].rstrip("/")) + 1:]
    if not cm or key not in cm[0].get("data", {}):
        problems.append("MPIJob: ConfigMap %s with key %s not in the output" % (vol["configMap"]["name"], key))
        return
    ws = json.loads(cm[0]["data"][key]).get("parallel", {}).get("world_size")
    if ws != np_:
        problems.append("MPIJob: job.json parallel.world_size %r != mpirun -np %r" % (ws, np_))


def check_servicemonitor(objs, problems):
    sms = find(objs, "ServiceMonitor")
    if len(sms) != 1:
        problems.append("gpu overlay: expected one ServiceMonitor, found %d" % len(sms))
        return
    sm = sms[0]
    sel = sm["spec"].get("selector", {}).get("matchLabels", {})
    picked = [s for s in find(objs, "Service") if labels_match(sel, s["metadata"].get("labels", {}))]
    names = {s["metadata"]["name"] for s in picked}
    for want in ("rdattn-coordinator", "rdattn-worker"):
        if want not in names:
            problems.append("ServiceMonitor: selector %s does not select Service %s" % (sel, want))
    for ep in sm["spec"].get("endpoints", []):
        for s in picked:
            if ep.get("port") not in {p.get("name") for p in s["spec"]["ports"]}:
                problems.append("ServiceMonitor: Service %s has no port named %r" % (s["metadata"]["name"], ep.get("port")))
        if ep.get("path", "/metrics") != "/metrics":
            problems.append("ServiceMonitor: path %r" % ep.get("path"))
    if not sm["spec"].get("endpoints"):
        problems.append("ServiceMonitor: no endpoints")


def check(objs, image, gpu):
    problems = []
    for o in objs:
        if o["kind"] not in ("Namespace",) and o["metadata"].get("namespace") != NAMESPACE:
            problems.append("%s %s: namespace %r, want %s" % (o["kind"], o["metadata"]["name"],
                                                              o["metadata"].get("namespace"), NAMESPACE))
        for c in all_containers(o):
            if c["image"] != image:
                problems.append("%s %s: container %s image %s, want %s" % (o["kind"], o["metadata"]["name"],
                                                                          c["name"], c["image"], image))
        if not gpu and not CORE_API.match(o["apiVersion"]):
            problems.append("%s %s: %s needs a CRD; keep it out of this kustomization" % (o["kind"], o["metadata"]["name"], o["apiVersion"]))
    check_coordinator(objs, image, problems)
    check_worker(objs, gpu, problems)
    if gpu:
        check_mpijob(objs, problems)
        check_servicemonitor(objs, problems)
    return problems


# ----------------------------------------------------------------------------- modes
def run_checks(root):
    passed = failed = 0
    for sub, (image, gpu) in OVERLAYS.items():
        kdir = os.path.join(root, "deploy", "k8s", sub)
        objs = render(kdir)
        kinds = {}
        for o in objs:
            kinds[o["kind"]] = kinds.get(o["kind"], 0) + 1
        problems = check(objs, image, gpu)
        for p in problems:
            print("k8s_render_test: %s: %s" % (sub, p))
        print("k8s_render_test: %s: %d objects (%s): %s" % (
            sub, len(objs), ", ".join("%s %d" % kv for kv in sorted(kinds.items())),
            "FAIL" if problems else "ok"))
        failed += bool(problems)
        passed += not problems
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


def workers_container(objs):
    return container(find(objs, "StatefulSet", "rdattn-worker")[0]["spec"]["template"]["spec"], "worker")


def coord(objs):
    return find(objs, "Deployment", "rdattn-coordinator")[0]


def coord_container(objs):
    return container(coord(objs)["spec"]["template"]["spec"], "coordinator")


def set_env(c, name, value):
    for e in c["env"]:
        if e["name"] == name:
            e["value"] = value


MUTATIONS = [  # (description, function(objs), substring the report must contain)
    ("readiness probe removed", lambda o: coord_container(o).pop("readinessProbe"), "no grpc readinessProbe"),
    ("liveness probe on a wrong port", lambda o: coord_container(o)["livenessProbe"]["grpc"].update(port=50052),
     "livenessProbe grpc port 50052"),
    ("two coordinators", lambda o: coord(o)["spec"].update(replicas=2), "replicas 2"),
    ("rolling update", lambda o: coord(o)["spec"].update(strategy={"type": "RollingUpdate"}), "want Recreate"),
    ("--tokens-file dropped", lambda o: coord_container(o)["args"].remove("--tokens-file=/etc/rdattn/auth/tokens"),
     "no --tokens-file"),
    ("--db off the volume", lambda o: coord_container(o)["args"].__setitem__(1, "--db=/data/rdattn.db"),
     "not on a mounted PersistentVolumeClaim"),
    ("slots != GPUs", lambda o: set_env(workers_container(o), "RDATTN_SLOTS", "4"), "--slots '4' but nvidia.com/gpu limit 8"),
    ("checkpoint claim RWO", lambda o: find(o, "PersistentVolumeClaim", "rdattn-shared")[0]["spec"].update(
        accessModes=["ReadWriteOnce"]), "not ReadWriteMany"),
    ("worker dials a wrong port", lambda o: workers_container(o)["args"].__setitem__(
        0, "--coordinator=rdattn-coordinator:7070"), "port not served"),
    ("scrape annotation wrong port", lambda o: coord(o)["spec"]["template"]["metadata"]["annotations"].update(
        {"prometheus.io/port": "9402"}), "prometheus.io/port is '9402'"),
    ("Service metrics port renamed", lambda o: find(o, "Service", "rdattn-worker")[0]["spec"]["ports"][0].update(
        name="prom"), "has no port named 'metrics'"),
    ("mpirun -np off", lambda o: find(o, "MPIJob")[0]["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"][
        "containers"][0]["args"].__setitem__(1, "8"), "mpirun -np 8"),
    ("MPIJob removed", lambda o: o.remove(find(o, "MPIJob")[0]), "expected one MPIJob"),
]

BROKEN_OVERLAY = """apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - ../gpu
patches:
  - target: {kind: Deployment, name: rdattn-coordinator}
    patch: |-
      - op: remove
        path: /spec/template/spec/containers/0/readinessProbe
  - target: {kind: Service, name: rdattn-coordinator}
    patch: |-
      - op: replace
        path: /spec/ports/1/port
        value: 9999
"""


def self_test(root):
    image, _ = OVERLAYS["overlays/gpu"]
    good = render(os.path.join(root, "deploy", "k8s", "overlays", "gpu"))
    base_problems = check(good, image, True)
    assert base_problems == [], base_problems
    passed = 0
    for what, mutate, want in MUTATIONS:
        objs = copy.deepcopy(good)
        mutate(objs)
        problems = check(objs, image, True)
        assert any(want in p for p in problems), (what, want, problems)
        print("self-test: %-30s -> %s" % (what, [p for p in problems if want in p][0]))
        passed += 1
    # The same through kustomize: a broken overlay on top of the real one.
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(os.path.join(root, "deploy", "k8s"), os.path.join(tmp, "k8s"))
        os.makedirs(os.path.join(tmp, "k8s", "overlays", "broken"))
        with open(os.path.join(tmp, "k8s", "overlays", "broken", "kustomization.yaml"), "w") as f:
            f.write(BROKEN_OVERLAY)
        problems = check(render(os.path.join(tmp, "k8s", "overlays", "broken")), image, True)
    wants = ["no grpc readinessProbe", "Service rdattn-coordinator: no port metrics = 9401"]
    for w in wants:
        assert any(w in p for p in problems), (w, problems)
    print("self-test: a broken overlay rendered by kustomize is reported: %s" % problems)
    passed += 1
    # And the CPU overlays must not carry GPUs.
    cpu = render(os.path.join(root, "deploy", "k8s", "overlays", "cpu-demo"))
    workers_container(cpu)["resources"].setdefault("limits", {})["nvidia.com/gpu"] = 1
    problems = check(cpu, OVERLAYS["overlays/cpu-demo"][0], False)
    assert any("requests nvidia.com/gpu on a CPU deployment" in p for p in problems), problems
    print("self-test: %-30s -> %s" % ("GPU on a CPU worker", problems))
    passed += 1
    print("%d passed, 0 failed" % passed)
    return 0


def main():
    args = sys.argv[1:]
    if len(args) == 2 and args[0] == "--self-test":
        return self_test(args[1])
    if len(args) == 1 and not args[0].startswith("-"):
        return run_checks(args[0])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
