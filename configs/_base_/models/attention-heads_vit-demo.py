# mmseg's classic attention decode heads (configs/attention_heads/) on the
# CPU demo encoder (vit-demo.py: 4 layers, 96 wide, 8x8 patches, a 16x16
# token grid per 128x128 crop), to compare their decoder attention with the
# white-box heads' on the same frozen random ViT. What the four heads
# share; a config of that folder names the head and its attention sizes:
#     model = dict(decode_head=dict(type='NLHead', reduction=2))
# The Segmenter model gives the encoder-decoder, the demo encoder and its
# test-time settings; its decode head is replaced by these fields.
_base_ = ['./segmenter_vit-b16_mask.py', './vit-demo.py']
model = dict(
    _base_.vit_demo,
    decode_head=dict(
        _delete_=True,
        # the encoder's last layer (mmseg's ViT out_indices=-1, the head's
        # in_index=-1), as every other demo head
        in_channels=96,
        channels=96,
        num_classes=150,
        # no dropout before the classifier (mmseg's configs of these heads
        # use 0.1), as the other demo heads, and no auxiliary FCN head
        dropout_ratio=0.0,
        # BatchNorm in one process (mmseg's configs of these heads use
        # SyncBN, which needs a distributed run)
        norm_cfg=dict(type='BN', requires_grad=True),
        align_corners=False,
        loss_decode=_base_.demo_loss))
