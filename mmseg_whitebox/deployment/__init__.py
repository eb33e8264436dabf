"""Deployment formats beyond mmseg's Python APIs: ONNX export of a whole
segmentor, checked against PyTorch with onnxruntime
(:mod:`.onnx_export`; needs the ``deploy`` extra, imported on use), and
:class:`OnnxSegmentor`, which predicts images with an exported graph as
``inference_model`` does, with numpy, OpenCV and onnxruntime only
(:mod:`.onnx_segmentor`)."""
from .onnx_segmentor import OnnxSegmentor, Prediction

__all__ = ['OnnxSegmentor', 'Prediction']
