"""The seed's MLP example: export it, check it against eager, and write the artifacts."""

import os

import torch
import torch.nn as nn

import dynamo_onnx


class MLPModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc0 = nn.Linear(8, 8, bias=True)
        self.fc1 = nn.Linear(8, 4, bias=True)
        self.fc2 = nn.Linear(4, 2, bias=True)
        self.fc3 = nn.Linear(2, 2, bias=True)

    def forward(self, tensor_x: torch.Tensor):
        tensor_x = self.fc0(tensor_x)
        tensor_x = torch.sigmoid(tensor_x)
        tensor_x = self.fc1(tensor_x)
        tensor_x = torch.sigmoid(tensor_x)
        tensor_x = self.fc2(tensor_x)
        tensor_x = torch.sigmoid(tensor_x)
        output = self.fc3(tensor_x)
        return output


def main() -> None:
    torch.manual_seed(0)
    model = MLPModel()
    tensor_x = torch.rand((97, 8), dtype=torch.float32)
    onnx_program = dynamo_onnx.dynamo_export(model, tensor_x)
    onnx_program.save("mlp.onnx")
    onnx_program.save_diagnostics("mlp.sarif")  # SARIF 2.1.0: open it in VS Code's SARIF Viewer
    onnx_program.diagnostics.save_markdown("mlp.md")  # the same findings, for people
    expected = model(tensor_x)
    (actual,) = onnx_program(tensor_x)
    diff = (expected - actual).abs().max().item()
    print(f"max |ONNX Runtime - eager| = {diff:.2e}")
    for path in ("mlp.onnx", "mlp.sarif", "mlp.md"):
        print(f"wrote {os.path.abspath(path)}")


if __name__ == "__main__":
    main()
