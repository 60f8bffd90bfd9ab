#!/usr/bin/env python3
"""Builds the ONNX models the benchmark runs in onnxruntime-node (committed in bench/models/).

mha-h{H}.onnx / mha-h{H}-causal.onnx: one com.microsoft.MultiHeadAttention node, inputs
query/key/value [B, T, H*D] with symbolic B, T and hidden size, num_heads = H; the causal one sets
unidirectional = 1 (ORT then computes the full T x T matrix and masks it). Needs `pip install onnx`.
"""
import os
import onnx
from onnx import TensorProto, helper

here = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'models')
os.makedirs(here, exist_ok=True)

for heads in (8,):
    for causal in (False, True):
        shape = ['B', 'T', 'HD']
        node = helper.make_node(
            'MultiHeadAttention', ['q', 'k', 'v'], ['out'], domain='com.microsoft',
            num_heads=heads, **({'unidirectional': 1} if causal else {}),
        )
        graph = helper.make_graph(
            [node], 'mha',
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in ('q', 'k', 'v')],
            [helper.make_tensor_value_info('out', TensorProto.FLOAT, shape)],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', 17), helper.make_opsetid('com.microsoft', 1)], producer_name='fa-wasm-bench')
        model.ir_version = 8
        onnx.checker.check_model(model)
        name = f"mha-h{heads}{'-causal' if causal else ''}.onnx"
        onnx.save(model, os.path.join(here, name))
        print('wrote', name)
