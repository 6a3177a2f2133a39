#!/usr/bin/env python3
"""JPEG decoding and ImageNet augmentation three ways, on one machine in one run (issue 55):

  local    tf.data in the trainer process: TFRecordDataset(files, num_parallel_reads=2)
           .shuffle(256) .map(parse_single_example + the ResNet reference training
           preprocessing: sample_distorted_bounding_box on extract_jpeg_shape,
           decode_and_crop_jpeg, resize to 224x224 (bilinear, float32), random_flip_left_right,
           num_parallel_calls=AUTOTUNE) .batch(64) .repeat() .prefetch(AUTOTUNE): epochs kept
           apart as readerd keeps them (each ends in a short batch)
  service  that whole pipeline on a tf.data service: a DispatchServer and one WorkerServer in
           one separate process on 127.0.0.1 (as ../shared/tfdata-bench/tfdata_bench.py
           runs them), the trainer consuming
           dataset.apply(distribute(processing_mode="parallel_epochs")).prefetch(AUTOTUNE)
  readerd  a release readerd (--readerd BIN) running DATA_DIR/jpeg.json's transforms
           (decodeImage, randomResizedCrop, randomFlipLeftRight), the trainer reading it with
           readerd.Client(addr).read(spec)

    /work/tfvenv/bin/python bench/jpeg_data.py /tmp/jpeg2000 --images 2000
    CARGO_TARGET_DIR=/work/bench-target cargo build --release --bin readerd --bin readerctl
    /work/tfvenv/bin/python bench/preprocess.py /tmp/jpeg2000 --readerd /work/bench-target/release/readerd \\
        [--rounds 3] [--duration 20] [--warmup 5] [--modes local,service,readerd]

Rounds are interleaved (local, service, readerd, local, ...). Each trainer is a fresh Python
process (TensorFlow's threads and memory do not carry over), and every server is started
afresh for its round and is listening before the trainer starts. The trainer touches every
array it receives (the sum of the float32 [64, 224, 224, 3] images and of the labels) and
counts images; it measures `--duration` seconds after `--warmup` seconds from its first
batch, and reports on stdout as JSON:
  - images/s in that window;
  - CPU-seconds per image of every process involved (trainer, and the tf.data service
    server or readerd): utime + stime (+ reaped children's) from /proc/PID/stat of each
    process and its descendants, at the start and the end of the window;
  - peak RSS (VmHWM) of the trainer, and of the server (read just before it is stopped);
  - the time to the first batch, from the start of the trainer's iteration (iter(dataset),
    client.read(spec)) to the first batch in hand.
Prints a markdown table (medians over rounds, and each round's figure) and writes the raw
results to DATA_DIR/results/preprocess-<timestamp>.json (servers' and trainers' stderr in
the .log beside it).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

TICKS = os.sysconf("SC_CLK_TCK")
BATCH = 64
SIZE = 224
RESULT = "RESULT "  # the trainer's last line on stdout: RESULT {json}


# ----------------------------------------------------------------------------
# /proc
# ----------------------------------------------------------------------------

def stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            data = f.read()
    except OSError:
        return None
    return data[data.rindex(")") + 2:].split()  # fields from the state on (field 3)


def descendants(pid: int) -> list[int]:
    """pid's live descendants (by the parent field of every /proc/N/stat)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            fields = stat_fields(int(name))
            if fields is not None:
                children.setdefault(int(fields[1]), []).append(int(name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def tree_cpu_s(pid: int) -> float | None:
    """utime + stime + cutime + cstime of pid and of its live descendants, in seconds."""
    total, seen = 0.0, False
    for p in [pid] + descendants(pid):
        fields = stat_fields(p)
        if fields is not None:
            seen = True
            total += sum(int(v) for v in fields[11:15]) / TICKS
    return total if seen else None


def peak_rss_kb(pid: int | str) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def machine_cpu_s() -> tuple[float, float]:
    """Machine-wide busy and steal CPU seconds, from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    user, nice, system, idle, iowait, irq, softirq, steal = v[:8]
    return (user + nice + system + irq + softirq) / TICKS, steal / TICKS


def loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


# ----------------------------------------------------------------------------
# The tf.data pipeline (local, and the one the tf.data service worker runs)
# ----------------------------------------------------------------------------

def tf_pipeline(tf, files: list[str]):
    features = {"image/encoded": tf.io.FixedLenFeature([], tf.string),
                "image/class/label": tf.io.FixedLenFeature([], tf.int64)}

    def preprocess(serialized):
        parsed = tf.io.parse_single_example(serialized, features)
        jpeg = parsed["image/encoded"]
        begin, size, _ = tf.image.sample_distorted_bounding_box(
            tf.image.extract_jpeg_shape(jpeg), bounding_boxes=tf.zeros([1, 0, 4], tf.float32),
            min_object_covered=0.1, aspect_ratio_range=[0.75, 1.33], area_range=[0.08, 1.0],
            max_attempts=10, use_image_if_no_bounding_boxes=True)
        offset_y, offset_x, _ = tf.unstack(begin)
        height, width, _ = tf.unstack(size)
        image = tf.image.decode_and_crop_jpeg(jpeg, tf.stack([offset_y, offset_x, height, width]), channels=3)
        image = tf.image.resize(image, [SIZE, SIZE])  # bilinear, float32
        image = tf.image.random_flip_left_right(image)
        return {"image": image, "image/class/label": parsed["image/class/label"]}

    AUTOTUNE = tf.data.AUTOTUNE
    # Epochs kept apart, as readerd keeps them (`numEpochs` -1): each epoch shuffled anew and
    # ending in a short batch; the prefetch after the repeat carries over epoch boundaries.
    return (tf.data.TFRecordDataset(files, num_parallel_reads=2)
            .shuffle(256)
            .map(preprocess, num_parallel_calls=AUTOTUNE)
            .batch(BATCH)
            .repeat()
            .prefetch(AUTOTUNE))


def data_files(data: str) -> list[str]:
    files = sorted(glob.glob(os.path.join(data, "jpeg-*.tfrecord")))
    if not files:
        sys.exit(f"no jpeg-*.tfrecord in {data}: run bench/jpeg_data.py first")
    return files


# ----------------------------------------------------------------------------
# _server: tf.data service dispatcher + worker in one process
# ----------------------------------------------------------------------------

def run_server(args) -> None:
    import tensorflow as tf
    svc = tf.data.experimental.service
    dispatcher = svc.DispatchServer(svc.DispatcherConfig(port=args.dispatcher_port, protocol="grpc"))
    worker = svc.WorkerServer(svc.WorkerConfig(
        dispatcher_address=f"127.0.0.1:{args.dispatcher_port}",
        worker_address=f"127.0.0.1:{args.worker_port}", port=args.worker_port, protocol="grpc"))
    print(f"READY {dispatcher.target}", flush=True)
    worker.join()  # SIGTERM's default action ends the process


# ----------------------------------------------------------------------------
# _trainer: one mode, one round; measures and prints RESULT {json}
# ----------------------------------------------------------------------------

def run_trainer(args) -> None:
    import numpy as np
    watch = [int(p) for p in args.watch_pids.split(",") if p]
    me = os.getpid()
    load_start = loadavg()

    t_build = time.perf_counter()
    if args.mode == "readerd":
        import readerd
        with open(os.path.join(args.data, "jpeg.json")) as f:
            spec = json.load(f)
        client = readerd.Client(args.addr)
        t_iter = time.perf_counter()
        stream = client.read(spec)
        batches = iter(stream)

        def touch(batch):
            images = np.asarray(batch["image"])
            float(images.sum())
            int(np.asarray(batch["image/class/label"]).sum())
            return images.shape[0]
        tf_version = None
    else:
        import tensorflow as tf
        tf_version = tf.__version__
        ds = tf_pipeline(tf, data_files(args.data))
        if args.mode == "service":
            ds = ds.apply(tf.data.experimental.service.distribute(
                processing_mode="parallel_epochs", service=f"grpc://127.0.0.1:{args.dispatcher_port}",
                compression=None if args.compression == "NONE" else args.compression))
            if args.client_prefetch:
                ds = ds.prefetch(tf.data.AUTOTUNE)
        t_iter = time.perf_counter()
        batches = iter(ds)

        def touch(batch):
            images = batch["image"].numpy()
            float(images.sum())
            int(batch["image/class/label"].numpy().sum())
            return images.shape[0]

    def cpu_now():
        return {"trainer": tree_cpu_s(me), **{str(p): tree_cpu_s(p) for p in watch}}

    images = 0
    t_first = None
    start = None  # (t, images, cpu, machine) at the window's start
    per_second: list[int] = []
    for batch in batches:
        now = time.perf_counter()
        if t_first is None:
            t_first = now
        n = touch(batch)
        now = time.perf_counter()
        images += n
        sec = int(now - t_first)
        per_second.extend([0] * (sec + 1 - len(per_second)))
        per_second[sec] += n
        if start is None and now - t_first >= args.warmup:
            start = (now, images, cpu_now(), machine_cpu_s())
        if start is not None and now - start[0] >= args.duration:
            break
    t_end = time.perf_counter()
    cpu_end, machine_end = cpu_now(), machine_cpu_s()
    if start is None:
        raise RuntimeError("the stream ended before the warm-up was over")
    window = t_end - start[0]
    window_images = images - start[1]
    cpu = {k: cpu_end[k] - start[2][k] for k in cpu_end
           if cpu_end[k] is not None and start[2].get(k) is not None}
    result = {
        "mode": args.mode,
        "build_s": t_iter - t_build,
        "ttfb_s": t_first - t_iter,
        "window_s": window,
        "window_images": window_images,
        "images_per_s": window_images / window,
        "cpu_s": cpu,  # trainer, and each watched server pid
        "cpu_s_per_image": sum(cpu.values()) / window_images,
        "cores": {k: v / window for k, v in cpu.items()},
        "machine_busy_cores": (machine_end[0] - start[3][0]) / window,
        "machine_steal_cores": (machine_end[1] - start[3][1]) / window,
        "trainer_peak_rss_kB": peak_rss_kb("self"),
        "total_images": images,
        "per_second_images": per_second,
        "load_start": load_start, "load_end": loadavg(),
        "tf_version": tf_version,
    }
    sys.stdout.write(RESULT + json.dumps(result) + "\n")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # skip tearing down an endless iterator, a tf.data service job, a stream


# ----------------------------------------------------------------------------
# Orchestrator
# ----------------------------------------------------------------------------

def wait_listening(proc: subprocess.Popen, ports: list[int], what: str, timeout: float = 180) -> None:
    began = time.perf_counter()
    while not all(listening(p) for p in ports):
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} (see the log)")
        if time.perf_counter() - began > timeout:
            raise RuntimeError(f"{what} is not listening after {timeout} s")
        time.sleep(0.05)


def start_service(args, log):
    dispatcher_port, worker_port = free_port(), free_port()
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), args.data, "--role", "_server",
                             "--dispatcher-port", str(dispatcher_port), "--worker-port", str(worker_port)],
                            stdout=subprocess.PIPE, stderr=log, text=True)
    ready = threading.Event()

    def reader():
        for line in proc.stdout:
            if line.startswith("READY"):
                ready.set()
    threading.Thread(target=reader, daemon=True).start()
    if not ready.wait(180):
        proc.kill()
        raise RuntimeError("the tf.data service did not start (see the log)")
    wait_listening(proc, [dispatcher_port, worker_port], "the tf.data service")
    return proc, ["--dispatcher-port", str(dispatcher_port)]


def start_readerd(args, log, state_dir):
    port = free_port()
    proc = subprocess.Popen([args.readerd, "--data-root", args.data, "--listen", f"127.0.0.1:{port}",
                             "--allow-unauthenticated", "--state-dir", state_dir],
                            stdout=log, stderr=log)
    wait_listening(proc, [port], "readerd")
    return proc, ["--addr", f"127.0.0.1:{port}"]


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run_case(args, mode: str, log) -> dict:
    server, extra, state_dir = None, [], None
    try:
        if mode == "service":
            server, extra = start_service(args, log)
        elif mode == "readerd":
            state_dir = tempfile.mkdtemp(prefix="readerd-state-")
            server, extra = start_readerd(args, log, state_dir)
        cmd = [sys.executable, os.path.abspath(__file__), args.data, "--role", "_trainer", "--mode", mode,
               "--duration", str(args.duration), "--warmup", str(args.warmup),
               "--compression", args.compression, *extra]
        if not args.client_prefetch:
            cmd.append("--no-client-prefetch")
        if server is not None:
            cmd += ["--watch-pids", str(server.pid)]
        log.write(f"\n===== {mode}: {' '.join(cmd)}\n")
        log.flush()
        out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=log, text=True,
                             timeout=args.warmup + args.duration + 600)
        lines = [line for line in out.stdout.splitlines() if line.startswith(RESULT)]
        if out.returncode != 0 or not lines:
            raise RuntimeError(f"the {mode} trainer exited with {out.returncode} (see the log)")
        result = json.loads(lines[-1][len(RESULT):])
        if server is not None:
            result["server_pid"] = server.pid
            result["server_peak_rss_kB"] = peak_rss_kb(server.pid)
            result["cpu_s"] = {("server" if k == str(server.pid) else k): v for k, v in result["cpu_s"].items()}
            result["cores"] = {("server" if k == str(server.pid) else k): v for k, v in result["cores"].items()}
        return result
    finally:
        if server is not None:
            stop(server)
        if state_dir is not None:
            subprocess.run(["rm", "-rf", state_dir])


def med(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt(v, spec):
    return "-" if v is None else format(v, spec)


def table(results: list[dict], modes: list[str]) -> str:
    lines = ["| mode | images/s | CPU-ms per image (trainer + server) | trainer cores | server cores | "
             "trainer peak RSS MB | server peak RSS MB | first batch s |",
             "|---|---|---|---|---|---|---|---|"]
    for mode in modes:
        runs = [r for r in results if r.get("mode") == mode and "error" not in r]
        errors = [r for r in results if r.get("mode") == mode and "error" in r]
        if not runs:
            lines.append(f"| {mode} | failed: {'; '.join(r['error'] for r in errors)} |" + " |" * 6)
            continue

        def cell(key, spec, scale=1.0):
            values = [None if key(r) is None else key(r) * scale for r in runs]
            if all(v is None for v in values):
                return "-"
            each = ", ".join(fmt(v, spec) for v in values)
            return f"{fmt(med(values), spec)} ({each})" if len(values) > 1 else fmt(med(values), spec)

        lines.append("| " + " | ".join([
            mode + (f" ({len(errors)} failed)" if errors else ""),
            cell(lambda r: r["images_per_s"], ",.0f"),
            cell(lambda r: r["cpu_s_per_image"], ".2f", 1000.0),
            cell(lambda r: r["cores"].get("trainer"), ".2f"),
            cell(lambda r: r["cores"].get("server"), ".2f"),
            cell(lambda r: r["trainer_peak_rss_kB"], ",.0f", 1 / 1024),
            cell(lambda r: r.get("server_peak_rss_kB"), ",.0f", 1 / 1024),
            cell(lambda r: r["ttfb_s"], ".2f"),
        ]) + " |")
    return "\n".join(lines)


def orchestrate(args) -> None:
    modes = [m for m in args.modes.split(",") if m]
    for mode in modes:
        if mode not in ("local", "service", "readerd"):
            sys.exit(f"unknown mode {mode!r}: local, service, readerd")
    if "readerd" in modes and not (args.readerd and os.access(args.readerd, os.X_OK)):
        sys.exit("--readerd BIN (a release readerd) is needed for the readerd mode")
    if "readerd" in modes and not os.path.exists(os.path.join(args.data, "jpeg.json")):
        sys.exit(f"{args.data}/jpeg.json not found: run bench/jpeg_data.py first")
    files = data_files(args.data)
    size = sum(os.path.getsize(f) for f in files)
    nproc = subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()
    print(f"{len(files)} files, {size / 1e6:.1f} MB in {args.data}; cores: sched_getaffinity "
          f"{len(os.sched_getaffinity(0))}, nproc {nproc}; load {loadavg()}", flush=True)

    res_dir = os.path.join(args.data, "results")
    os.makedirs(res_dir, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out_path = os.path.join(res_dir, f"preprocess-{stamp}.json")
    log_path = os.path.join(res_dir, f"preprocess-{stamp}.log")
    results = []
    began = time.time()
    with open(log_path, "w") as log:
        for round_no in range(args.rounds):
            for mode in modes:
                print(f"[{time.time() - began:6.1f}s] round {round_no} {mode:8} load {loadavg()} ...",
                      end=" ", flush=True)
                try:
                    r = run_case(args, mode, log)
                    print(f"{r['images_per_s']:,.1f} images/s, {r['cpu_s_per_image'] * 1000:.1f} CPU-ms/image "
                          f"({', '.join(f'{k} {v:.2f}' for k, v in r['cores'].items())} cores; "
                          f"machine {r['machine_busy_cores']:.2f}), first batch {r['ttfb_s']:.2f} s", flush=True)
                except Exception as e:  # keep going: the table names the failure
                    r = {"mode": mode, "error": str(e)}
                    print("ERROR", e, flush=True)
                r["round"] = round_no
                results.append(r)
    with open(out_path, "w") as f:
        json.dump({"argv": sys.argv, "uname": " ".join(os.uname()), "nproc": nproc,
                   "affinity": len(os.sched_getaffinity(0)), "data_bytes": size, "files": len(files),
                   "rounds": args.rounds, "duration_s": args.duration, "warmup_s": args.warmup,
                   "compression": args.compression, "client_prefetch": args.client_prefetch,
                   "results": results}, f, indent=1)
    print()
    print(f"Medians of {args.rounds} round(s), each round's figure in brackets; "
          f"{args.duration:g} s measured after {args.warmup:g} s, batches of {BATCH} float32 "
          f"[{SIZE}, {SIZE}, 3]; {nproc} cores.")
    print()
    print(table(results, modes))
    print(f"\nresults: {out_path}\nlog:     {log_path}\ntotal {time.time() - began:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data", help="what bench/jpeg_data.py wrote: jpeg-*.tfrecord and jpeg.json")
    parser.add_argument("--readerd", help="a release readerd binary")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=20.0, help="seconds measured after the warm-up")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds after the first batch not measured")
    parser.add_argument("--modes", default="local,service,readerd")
    parser.add_argument("--compression", default="AUTO",
                        help="tf.data service compression: AUTO (TensorFlow's default, snappy) or NONE")
    parser.add_argument("--no-client-prefetch", dest="client_prefetch", action="store_false",
                        help="service: no .prefetch(AUTOTUNE) after distribute() in the trainer")
    # internal: the subprocesses
    parser.add_argument("--role", default="run", choices=["run", "_trainer", "_server"], help=argparse.SUPPRESS)
    parser.add_argument("--mode", help=argparse.SUPPRESS)
    parser.add_argument("--addr", help=argparse.SUPPRESS)
    parser.add_argument("--dispatcher-port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--worker-port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--watch-pids", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.data = os.path.abspath(args.data)
    if args.readerd:
        args.readerd = os.path.abspath(args.readerd)
    if args.role == "_server":
        run_server(args)
    elif args.role == "_trainer":
        run_trainer(args)
    else:
        orchestrate(args)


if __name__ == "__main__":
    main()
