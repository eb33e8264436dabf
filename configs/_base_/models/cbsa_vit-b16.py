# CBT decoder (CBSA, Wen et al. NeurIPS 2025) on mmseg's VisionTransformer:
# the Segmenter encoder settings, the Segmenter decode head replaced by 3
# CBSA layers with a 10x10 grid of representatives per subspace, no dropout
# (CBSA_semantic_segmentation/segm/config.yml:99-101, model/dec_blocks.py).
_base_ = './segmenter_vit-b16_mask.py'
model = dict(
    decode_head=dict(
        _delete_=True,
        type='CBSAHead',
        in_channels=768,
        channels=768,
        num_classes=150,
        num_layers=3,
        attn_cfg=dict(
            type='CBSA',
            num_heads=6,
            head_dim=100,
            rep_grid=(10, 10),
            out_proj='linear',
            # the paper's eq. 5 stops the gradient through the pooled
            # representatives (CBSA's default); the released decoder does
            # not (CBSA_semantic_segmentation/segm/model/dec_blocks.py:92),
            # and this experiment trains as it was released
            rep_stop_grad=False),
        dropout_ratio=0.0,
        loss_decode=_base_.loss_decode))
