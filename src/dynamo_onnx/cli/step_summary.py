"""The gate's verdict as markdown for the GitHub Actions job summary (the file
``GITHUB_STEP_SUMMARY`` names): a table of the failing results."""

from __future__ import annotations

from typing import Any

from dynamo_onnx.cli.sarif_log import result_location, result_rule_name


def append_to_summary(path: str, text: str) -> None:
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(text)


def step_summary(
    verdict: str, scope: str, level: str, failing: list[dict[str, Any]], rules: list[Any]
) -> str:
    """A markdown table of the failing results for the GitHub Actions job summary."""
    icon = "❌" if failing else "✅"
    text = [
        f"### {icon} dynamo-onnx gate {verdict}\n",
        f"{len(failing)} {scope}result(s) at or above `{level}`.\n",
    ]
    if failing:
        text += ["| Level | Rule | Location | Message |", "| --- | --- | --- | --- |"]
        for result in failing:
            name = result_rule_name(result, rules)
            message = " ".join(result["message"]["text"].split()).replace("|", "\\|")
            text.append(
                f"| {result.get('level', 'warning')} | {result.get('ruleId', '')} `{name}` | "
                f"`{result_location(result)}` | {message} |"
            )
    return "\n".join(text) + "\n\n"
