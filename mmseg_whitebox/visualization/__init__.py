"""Pictures of predictions for the tools that draw them: which images to
read and where each picture goes (:mod:`.images`), and overlay figures
(:mod:`.overlay`, imported on use: it loads mmseg's visualizer)."""
