#!/usr/bin/env bash
# Instructions and one core's time per image of the preprocessing benchmark's transforms
# against libjpeg-turbo's own decode of the same JPEGs (issue 55): what the server's work on
# an image costs next to the floor the decoder itself sets. Instructions are counted by
# valgrind (cachegrind: exact and repeatable on a small shared machine); times are the
# median of 3 native runs on one thread. The count of a run that only reads the files is
# taken off each.
#
#   bash bench/jpeg_instructions.sh DATA [IMAGES]   # DATA from bench/jpeg_data.py; IMAGES 256
#
# PYTHON (default target/adapters-venv/bin/python, which has TensorFlow) takes the first
# IMAGES JPEGs out of DATA's TFRecords into DATA/jpegs-IMAGES/. Needs valgrind.
#
# Modes (server/benches/transforms.rs, READERD_BENCH_ONLY): libjpeg = libjpeg-turbo's
# tj3Decompress of the whole image to RGB at its default settings; decodeImage = readerd's
# whole decode (TensorFlow's settings: fast integer IDCT); chain = DATA/jpeg.json's transforms
# on each image (its box decoded, resized to 224x224 float32, flipped); batch = that chain on
# batches of 64 stacked into one buffer, as the server runs it.
set -euo pipefail
data=${1:?usage: bench/jpeg_instructions.sh DATA [IMAGES]}
images=${2:-256}
cd "$(dirname "$0")/.."
python=${PYTHON:-target/adapters-venv/bin/python}
jpegs="$data/jpegs-$images"
if [ ! -d "$jpegs" ]; then
    mkdir -p "$jpegs.tmp"
    TF_CPP_MIN_LOG_LEVEL=2 "$python" - "$data" "$jpegs.tmp" "$images" <<'PY'
import glob, os, sys
import tensorflow as tf
data, out, images = sys.argv[1], sys.argv[2], int(sys.argv[3])
files = sorted(glob.glob(os.path.join(data, "jpeg-*.tfrecord")))
feature = {"image/encoded": tf.io.FixedLenFeature([], tf.string)}
for n, record in enumerate(tf.data.TFRecordDataset(files).take(images)):
    jpeg = tf.io.parse_single_example(record, feature)["image/encoded"].numpy()
    with open(os.path.join(out, f"{n:05d}.jpg"), "wb") as f:
        f.write(jpeg)
PY
    mv "$jpegs.tmp" "$jpegs"
fi
bench=$(cargo bench -q -p readerd-server --bench transforms --no-run --message-format json 2>/dev/null |
    python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "transforms" and m.get("executable"):
        print(m["executable"])')
export READERD_BENCH_JPEGS=$jpegs READERD_BENCH_SPEC=$data/jpeg.json
instructions() {
    READERD_BENCH_ONLY=$1 valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null "$bench" 2>&1 |
        awk '/I +refs:/ { gsub(",", "", $NF); print $NF }'
}
micros() {
    for _ in 1 2 3; do READERD_BENCH_ONLY=$1 "$bench" | awk '{ print $(NF-4) }'; done | sort -n | sed -n 2p
}
none=$(instructions none)
echo "$images JPEGs of $data ($(du -sk "$jpegs" | cut -f1) KB), one thread"
printf '%-12s %16s %14s %14s\n' mode instructions/image us/image images/s/core
for mode in libjpeg decodeImage chain batch; do
    count=$(( $(instructions "$mode") - none ))
    us=$(micros "$mode")
    python3 -c "import sys; c, n, us = int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
print(f'{sys.argv[1]:<12} {c / n:>16,.0f} {us:>14,.0f} {1e6 / us:>14,.0f}')" "$mode" "$count" "$images" "$us"
done
