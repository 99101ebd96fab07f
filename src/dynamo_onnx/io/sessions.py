"""The one place an ONNX Runtime session is made, with one policy for its options.

Running the program, verifying it, checking that ONNX Runtime loads it, finding the first
divergence, and the benchmarks all make their sessions here, so they behave alike: on the
CPU unless the caller names providers; with the caller's own ``SessionOptions`` as given
(their logging, their threads), else with options of our own that log nothing to the
terminal (per session: the process-wide default logger is left as the caller set it) and
take ``threads`` and ``graph_optimizations`` from the call. ``tests/test_architecture.py``
fails on an ``InferenceSession(`` anywhere else in src/ or benchmarks/.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from dynamo_onnx.options import ONNXRuntimeOptions

__all__ = ["inference_session", "quiet_session_options"]

#: ONNX Runtime's FATAL: its warnings while it loads a model ("[W:onnxruntime ...
#: MergeShapeInfo]", "can't constant fold") are its optimizer's business, and its errors
#: while it runs ("[E:onnxruntime ... ExecuteKernel]") come back as the exception that
#: the finding or the caller's error reports; printed, they would say it twice.
_QUIET = 4


def quiet_session_options(
    *, threads: int | None = None, graph_optimizations: bool = True, prepacking: bool = True
) -> Any:
    """Session options of a session of our own: ONNX Runtime logs nothing to the terminal;
    ``threads`` intra-op threads (default: ONNX Runtime's, one per core); with
    ``graph_optimizations=False`` ONNX Runtime loads the model as it is (what a load check
    wants: its optimizations would only cost time); with ``prepacking=False`` it does not
    copy the MatMul weights into its packed layouts while loading, so a model with external
    data holds its weights as the file's memory map, the pages a run reads (what a check of
    a large model wants: the packed copies were the session's peak)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = _QUIET
    if threads is not None:
        options.intra_op_num_threads = threads
    if not graph_optimizations:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    if not prepacking:
        options.add_session_config_entry("session.disable_prepacking", "1")
    return options


def inference_session(
    model: str | bytes | os.PathLike[str],
    options: ONNXRuntimeOptions | None = None,
    *,
    threads: int | None = None,
    graph_optimizations: bool = True,
    prepacking: bool = True,
) -> Any:
    """An ``onnxruntime.InferenceSession`` for ``model`` (a path or a serialized model).

    Args:
        model: the file of the model, or its serialized bytes.
        options: the caller's providers and session options (``ONNXRuntimeOptions``); its
            session options are used as given, ``threads`` and ``graph_optimizations``
            then do not apply.
        threads: intra-op threads of a session of our own (the benchmarks' 1: the machine
            is shared, one thread is the stable figure).
        graph_optimizations: False to load the model without ONNX Runtime's optimizations.
        prepacking: False to keep the weights unpacked (:func:`quiet_session_options`).
    """
    import onnxruntime as ort

    options = options or ONNXRuntimeOptions()
    session_options = options.session_options
    if isinstance(session_options, Sequence):
        session_options = session_options[0] if session_options else None
    if session_options is None:  # the caller's own options keep their logging
        session_options = quiet_session_options(
            threads=threads, graph_optimizations=graph_optimizations, prepacking=prepacking
        )
    return ort.InferenceSession(
        os.fspath(model) if isinstance(model, os.PathLike) else model,
        sess_options=session_options,
        providers=options.execution_providers or ["CPUExecutionProvider"],
        provider_options=options.execution_provider_options,
    )
