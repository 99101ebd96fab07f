"""A model with real weights over 2 GB: export, save (external data chosen automatically),
load in ONNX Runtime, and report peak RSS around the save.

Target (issue 6): peak memory during save stays near the weights' size (no second copy).

    python benchmarks/large_save.py [--gib 2.25] [--dir /tmp]
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
import warnings

import torch

import dynamo_onnx


def rss_mib() -> float:
    with open("/proc/self/statm") as handle:
        pages = int(handle.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Wide(torch.nn.Module):
    """Square linear layers whose weights add up to the requested size."""

    def __init__(self, layers: int, width: int) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(layers))

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x))
        return x


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gib", type=float, default=2.25)
    parser.add_argument("--dir", default=tempfile.gettempdir())
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    width = 8192
    layers = max(1, round(args.gib * 2**30 / (width * width * 4)))
    model = Wide(layers, width).eval()
    weights_mib = sum(p.numel() * p.element_size() for p in model.parameters()) / 2**20
    x = torch.randn(2, width)
    with torch.no_grad():
        expected = model(x)
    program = dynamo_onnx.export(model, (x,))
    before_save = rss_mib()
    path = os.path.join(args.dir, "wide_over_2gb.onnx")
    t0 = time.perf_counter()
    program.save(path)  # over 2 GB: external data automatically
    save_s = time.perf_counter() - t0
    peak_after_save = peak_rss_mib()
    data = path + ".data"
    print(f"weights {weights_mib:.0f} MiB in {layers} x Linear({width}, {width})")
    print(
        f"saved in {save_s:.1f} s: {os.path.getsize(path) / 1e3:.0f} kB model, "
        f"{os.path.getsize(data) / 2**20:.0f} MiB external data"
    )
    print(
        f"RSS before save {before_save:.0f} MiB, peak through save {peak_after_save:.0f} MiB "
        f"(growth {peak_after_save - before_save:.0f} MiB; weights {weights_mib:.0f} MiB)"
    )
    program.release()
    del program
    from dynamo_onnx.io.sessions import inference_session

    session = inference_session(path)
    (actual,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    diff = (torch.from_numpy(actual) - expected).abs().max().item()
    print(f"ONNX Runtime loaded it: max |ORT - eager| = {diff:.2e}")
    os.remove(path)
    os.remove(data)


if __name__ == "__main__":
    main()
