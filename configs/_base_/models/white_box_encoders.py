# White-box encoders at their published sizes, as WhiteBoxViT backbones for
# 512x512 crops (patch 16, a 32x32 token grid). Not a model on its own: a
# config lists a model base and this file, and sets
#     model = dict(pretrained=None, backbone=dict(_base_.cbt_s, _delete_=True))
# (no pretrained white-box weights are loaded until converted ones are
# given through init_cfg=dict(type='Pretrained', checkpoint=...)).
#
# CRATE (Yu et al. 2023): MSSA + ISTA; T 384 wide / 12 deep / 6 x 64,
#   S 576 / 12 / 12 x 48, B 768 / 12 / 12 x 64 (6.1M, 13.1M, 22.8M
#   parameters at 224).
# ToST (Wu et al. 2025): TSSA + MLP (ratio 4); T 192 / 12 / 4 x 48,
#   S 384 / 12 / 8 x 48, as the released tost_cab_*_12_p16; B 768 / 12 /
#   12 x 64 as the paper's ToST-Base (its Table 6).
# CBT (CBSA paper): CBSA + ISTA; T 192 / 12 / 3 x 64, S 384 / 12 / 6 x 64,
#   B 768 / 12 / 12 x 64. CBSA pools 8x8 representatives from the 14x14
#   grid at 224 (1.75 tokens per side); at 512 the grid follows the token
#   grid: 16x16 of 32x32.
# CRATE+CBT: CBT's sizes, MSSA in the first half, CBSA in the second.
# CBSA-adapted ViTs (CBSA paper Fig. 9): a ViT's layers with every
#   attention replaced by CBSA over its pretrained query/key/value
#   projections (QKVCBSA), linear in the number of tokens; the weights of
#   a timm or mmseg ViT, converted with
#   tools/model_converters/timm2mmseg.py --to white-box.
# All in mmseg's ViT frame (linear patch embedding, learned position
# embedding, CLS token first). The published stems are options:
#   backbone=dict(_base_.cbt_s, stem_cfg=_base_.cbt_stem) (CBT's
#   convolutional stem; CRATE's: crate_stem), which the published
#   checkpoints need (tools/model_converters/whitebox2mmseg.py). ToST's
#   Fourier positions, layer scale and class-attention layers are not
#   reproduced here.
whitebox_vit = dict(
    type='WhiteBoxViT',
    img_size=(512, 512),
    patch_size=16,
    in_channels=3,
    drop_path_rate=0.1,
    final_norm=True,
    norm_cfg=dict(type='LN', eps=1e-6, requires_grad=True),
    with_cls_token=True,
    interpolate_mode='bicubic')
ista = dict(type='ISTA')
# CRATE and CBT normalise with PyTorch's LayerNorm default, eps 1e-5
# (CRATE model/crate.py PreNorm and mlp_head; CBSA repository
# CBSA_image_classification/models.py PreNorm); ToST with eps 1e-6 (ToST
# tost_vision/tost.py, norm_layer of every tost_cab_* model)
# Trained from scratch (no init_cfg), every encoder starts where its
# released factory starts (WhiteBoxViT.init_weights): CRATE and CBT at
# PyTorch's module defaults, CLS token and positions N(0, 1), ISTA
# dictionaries kaiming-uniform (CRATE model/crate.py:27-29,120-139, which
# initialises nothing itself; CBSA repository
# CBSA_image_classification/models.py:83-85,147-160); ToST as timm does:
# Linear trunc-normal 0.02 with zero bias, CLS token trunc-normal 0.02
# (ToST tost_vision/tost.py:372,398-408; its Fourier positions are not
# reproduced, the learned ones start as the released Segmenter ViT's,
# trunc-normal 0.02, segm/model/vit.py:92)
eps_1e5_vit = dict(whitebox_vit,
                   norm_cfg=dict(type='LN', eps=1e-5, requires_grad=True),
                   weight_init='pytorch')
tost_vit = dict(whitebox_vit, weight_init='timm')
crate_mssa = dict(type='MSSA', out_proj='linear', basis_init='trunc_normal',
                  step_size=False)
# rep_pool='leading': the released CBSA pools w[:, :-1], the first H x W
# tokens with the CLS token first (CBSA repository
# CBSA_image_classification/attn_layers.py, CBSA.forward); eq. 5 and the
# operator's default pool the patch grid
cbt_cbsa = dict(type='CBSA', rep_grid=(16, 16), out_proj='linear',
                rep_pool='leading')
# proj_bias=True: the released TSSA has a bias on U^T z (ToST
# tost_vision/tost.py, AttentionTSSA qkv built with qkv_bias=True by every
# tost_cab_* model); eq. (10) has none
tost_tssa = dict(type='TSSA', proj_bias=True)
mlp = dict(type='MLP', mlp_ratio=4)
# SyncBN: the released stem normalises every convolution with
# nn.SyncBatchNorm (CBSA repository CBSA_image_classification/models.py:
# 27-34, conv3x3), so that at one image per GPU (8xb1) the batch and
# running statistics are those of the world batch. Reverted to BN where
# torch cannot run it: one process (mmengine's Runner) and CPU processes
# (CPUDistributedDataParallel), each with a note in the log
cbt_stem = dict(type='ConvPatchStem', norm_cfg=dict(type='SyncBN'))
crate_stem = dict(type='NormedPatchEmbed', norm_cfg=dict(type='LN'))

crate_t = dict(eps_1e5_vit, embed_dims=384, num_layers=12, ffn_cfg=ista,
               attn_cfg=dict(crate_mssa, num_heads=6, head_dim=64))
crate_s = dict(eps_1e5_vit, embed_dims=576, num_layers=12, ffn_cfg=ista,
               attn_cfg=dict(crate_mssa, num_heads=12, head_dim=48))
crate_b = dict(eps_1e5_vit, embed_dims=768, num_layers=12, ffn_cfg=ista,
               attn_cfg=dict(crate_mssa, num_heads=12, head_dim=64))
tost_t = dict(tost_vit, embed_dims=192, num_layers=12, ffn_cfg=mlp,
              attn_cfg=dict(tost_tssa, num_heads=4, head_dim=48))
tost_s = dict(tost_vit, embed_dims=384, num_layers=12, ffn_cfg=mlp,
              attn_cfg=dict(tost_tssa, num_heads=8, head_dim=48))
tost_b = dict(tost_vit, embed_dims=768, num_layers=12, ffn_cfg=mlp,
              attn_cfg=dict(tost_tssa, num_heads=12, head_dim=64))
cbt_t = dict(eps_1e5_vit, embed_dims=192, num_layers=12, ffn_cfg=ista,
             attn_cfg=dict(cbt_cbsa, num_heads=3, head_dim=64))
cbt_s = dict(eps_1e5_vit, embed_dims=384, num_layers=12, ffn_cfg=ista,
             attn_cfg=dict(cbt_cbsa, num_heads=6, head_dim=64))
cbt_b = dict(eps_1e5_vit, embed_dims=768, num_layers=12, ffn_cfg=ista,
             attn_cfg=dict(cbt_cbsa, num_heads=12, head_dim=64))
crate_cbt_t = dict(
    cbt_t,
    attn_cfg=[dict(crate_mssa, num_heads=3, head_dim=64)] * 6 +
    [dict(cbt_cbsa, num_heads=3, head_dim=64)] * 6)
crate_cbt_s = dict(
    cbt_s,
    attn_cfg=[dict(crate_mssa, num_heads=6, head_dim=64)] * 6 +
    [dict(cbt_cbsa, num_heads=6, head_dim=64)] * 6)
crate_cbt_b = dict(
    cbt_b,
    attn_cfg=[dict(crate_mssa, num_heads=12, head_dim=64)] * 6 +
    [dict(cbt_cbsa, num_heads=12, head_dim=64)] * 6)

# CBSA-adapted ViTs: ViT-T/S/B with QKVCBSA (step sizes start at 1) and the
# patch-embedding bias timm's weights have; the converted weights are read
# from pretrain/ (nothing is downloaded)
qkv_cbsa = dict(type='QKVCBSA', rep_grid=(16, 16), head_dim=64)
cbsa_vit_t = dict(
    whitebox_vit, embed_dims=192, num_layers=12, ffn_cfg=mlp,
    patch_bias=True, attn_cfg=dict(qkv_cbsa, num_heads=3),
    init_cfg=dict(type='Pretrained',
                  checkpoint='pretrain/vit_tiny_patch16_384_white-box.pth'))
cbsa_vit_s = dict(
    cbsa_vit_t, embed_dims=384, attn_cfg=dict(qkv_cbsa, num_heads=6),
    init_cfg=dict(type='Pretrained',
                  checkpoint='pretrain/vit_small_patch16_384_white-box.pth'))
cbsa_vit_b = dict(
    cbsa_vit_t, embed_dims=768, attn_cfg=dict(qkv_cbsa, num_heads=12),
    init_cfg=dict(type='Pretrained',
                  checkpoint='pretrain/vit_base_patch16_384_white-box.pth'))

# MiTA ViTs (MiTA-Segmenter, QishuaiWen/MiTA at 55491ab, folder
# MiTA-Segmenter/segm/): the released Segmenter ViT with every attention
# replaced by MiTA (model/enc_blocks.py:15,88), over query/key/value and
# output projections with biases (model/mita/mita_attention.py:21,35,39):
# 7x7 landmarks average-pooled from the first 32x32 tokens, the CLS token
# first (router_pool='leading': mita_attention.py:43-46,142-144), 49 keys
# per routed expert (kv_topk = num_expert, :45,166), the shared expert
# mixed in (:117). The rest is the released ViT's
# (configs/segmenter/README.md): LayerNorm eps 1e-5 (enc_blocks.py:86-87,
# vit.py:89), MLP ratio 4 (model/factory.py:45-46), the patch
# convolution's bias (vit.py:28), positions resized bilinearly, drop path
# 0.1. The pretrained ViT weights, converted to WhiteBoxViT keys
# (tools/model_converters/timm2mmseg.py --to white-box, as for the
# CBSA-adapted ViTs), load one to one: MiTA adds no parameter
mita = dict(type='MiTA', pool_size=7, router_pool='leading')
mita_vit_t = dict(
    cbsa_vit_t, norm_cfg=dict(type='LN', eps=1e-5, requires_grad=True),
    interpolate_mode='bilinear', attn_cfg=dict(mita, num_heads=3))
mita_vit_s = dict(cbsa_vit_s, norm_cfg=mita_vit_t['norm_cfg'],
                  interpolate_mode='bilinear',
                  attn_cfg=dict(mita, num_heads=6))
