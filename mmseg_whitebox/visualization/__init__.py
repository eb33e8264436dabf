"""Pictures of predictions, shared by the tools that draw them (the image
demo, the ONNX inference tool, the demo's overlays): which images to read
and where each picture goes (:mod:`.images`), and overlay figures with a
title and a legend of the classes present (:mod:`.overlay`; imported on
use, it loads mmseg's visualizer)."""
