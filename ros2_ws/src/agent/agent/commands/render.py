"""`agent render`: the same scenes as the sim renders them and through a proxy, side by side, in one PNG.

    agent render --proxy-config sim/configs/proxy_gap.yaml --out docs/figures/gap_proxy.png --seeds 0 1 2

Top row: the sim's camera; bottom row: what the proxy delivers at the same episode's start
(`sim.proxy_views`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from agent.commands import at_least


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--proxy-config", type=Path, default=Path("sim/configs/proxy_gap.yaml"),
                        help="the proxy whose camera the bottom row shows")  # fmt: skip
    parser.add_argument("--sim-config", type=Path, default=Path("sim/configs/mujoco.yaml"), help="sim YAML")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(6)), help="one scene per seed")
    parser.add_argument("--width", type=at_least(8), help="camera width, px (default: the sim config's)")
    parser.add_argument("--height", type=at_least(8), help="camera height, px (default: the sim config's)")
    parser.add_argument("--scale", type=at_least(1), default=3, help="each pixel drawn this many times over")
    parser.add_argument("--out", type=Path, required=True, help="PNG to write")


def run(args: argparse.Namespace) -> int:
    from policies.config import from_root
    from sim.config import SimConfig
    from sim.proxy_views import side_by_side
    from sim.real_robot_proxy import ProxyConfig

    sim_cfg = SimConfig.from_yaml(from_root(args.sim_config))
    camera = sim_cfg.camera.model_copy(
        update={k: v for k, v in (("width", args.width), ("height", args.height)) if v is not None}
    )
    sim_cfg = sim_cfg.model_copy(update={"camera": camera})
    proxy = ProxyConfig.from_yaml(from_root(args.proxy_config))
    out = side_by_side(sim_cfg, proxy, args.seeds, args.out, args.scale)
    print(f"wrote {out}: top, the sim; bottom, {args.proxy_config}; seeds {args.seeds}")
    return 0
