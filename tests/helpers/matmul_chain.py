"""A 64x64x256 matmul chain with sections: the model issue 38 found kernels above the peak with."""

from __future__ import annotations


def chain_model(steps: int = 2):
    """x (64 x 256) down to 64 wide and up again, ``steps`` times, each step its own section with "Down" and
    "Up" inside (64x64x256 and 64x256x64 matmuls); the model and its example arguments."""
    import torch

    import sectionmark as sm

    class Chain(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.down = torch.nn.ModuleList(torch.nn.Linear(256, 64, bias=False) for _ in range(steps))
            self.up = torch.nn.ModuleList(torch.nn.Linear(64, 256, bias=False) for _ in range(steps))

        def forward(self, x):
            for index, (down, up) in enumerate(zip(self.down, self.up)):
                with sm.section(f"Step {index}"):
                    with sm.section("Down"):
                        x = down(x)
                    with sm.section("Up"):
                        x = up(x)
            return x

    torch.manual_seed(0)
    return Chain(), (torch.randn(64, 256),)
