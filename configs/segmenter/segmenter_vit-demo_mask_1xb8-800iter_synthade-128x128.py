# A CPU-sized Segmenter for the synthetic ADE20K-layout data: the demo
# encoder (_base_/models/vit-demo.py: a 4-layer, 96-wide ViT with 8x8
# patches, trained from scratch) and mmseg's mask transformer head. The demo
# configs of the other decoders take the same encoder from that file.
_base_ = [
    '../_base_/models/segmenter_vit-b16_mask.py',
    '../_base_/models/vit-demo.py', '../_base_/datasets/synthetic_ade20k.py',
    '../_base_/default_runtime.py', '../_base_/schedules/schedule_demo.py'
]
model = dict(
    _base_.vit_demo,
    decode_head=dict(
        # mmseg's head and initialisation, as the README's demo figures were
        # measured (the published configs initialise as released)
        type='SegmenterMaskTransformerHead',
        in_channels=96, channels=96, num_heads=3, embed_dims=96,
        # mmseg's head defaults, not the released decoder's dropout
        drop_path_rate=0.1, drop_rate=0.0, attn_drop_rate=0.0,
        loss_decode=_base_.demo_loss))
