# Segmenter's linear decoder: a 1x1 classifier on the patch tokens, no
# dropout (segm/model/decoder.py:13-34; mmseg FCNHead without convolutions).
_base_ = './segmenter_vit-s_mask_8xb1-160k_ade20k-512x512.py'
model = dict(
    decode_head=dict(
        _delete_=True,
        type='FCNHead',
        in_channels=384,
        channels=384,
        num_convs=0,
        dropout_ratio=0.0,
        concat_input=False,
        num_classes=150,
        loss_decode=_base_.loss_decode,
        # the released head is nn.Linear(d, n_cls) under init_weights:
        # trunc-normal std 0.02 (cut at +-2), bias 0 (segm/model/decoder.py:
        # 21-22, segm/model/utils.py:12-16); mmseg's default for conv_seg
        # is N(0, 0.01)
        init_cfg=dict(type='TruncNormal', std=0.02, a=-2.0, b=2.0, bias=0.0,
                      override=dict(name='conv_seg'))))
