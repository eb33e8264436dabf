"""Deployment formats beyond mmseg's Python APIs: ONNX export of a whole
segmentor, checked against PyTorch with onnxruntime
(:mod:`.onnx_export`; needs the ``deploy`` extra, imported on use)."""
