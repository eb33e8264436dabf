# ANN (Zhu et al., ICCV 2019) as mmseg's ANNHead on the CPU demo encoder:
# the asymmetric fusion block (queries from the high feature, keys and
# values pooled from the low one at scales 1, 3, 6, 8) then the asymmetric
# pyramid non-local block, 48 key channels (half the width, as mmseg's
# ann_r50-d8 sets 256 of 512). Two feature levels, as mmseg takes ResNet
# stages 3 and 4: the outputs of the encoder's layers 2 (low, before the
# final norm) and 4 (high, the last layer, the other demo heads' input).
_base_ = [
    '../_base_/models/attention-heads_vit-demo.py',
    '../_base_/datasets/synthetic_ade20k.py', '../_base_/default_runtime.py',
    '../_base_/schedules/schedule_demo.py'
]
model = dict(
    backbone=dict(out_indices=(1, 3)),
    decode_head=dict(
        type='ANNHead',
        in_channels=[96, 96],
        in_index=[0, 1],
        project_channels=48,
        query_scales=(1, ),
        key_pool_scales=(1, 3, 6, 8),
        # mmseg's ANNHead calls its dropout unconditionally (after the
        # fusion block and before the classifier), which BaseDecodeHead
        # leaves None at 0: mmseg's 0.1, the one demo head with dropout
        dropout_ratio=0.1))
