_base_ = [
    '../_base_/models/cbsa_vit-b16.py', '../_base_/datasets/ade20k.py',
    '../_base_/default_runtime.py', '../_base_/schedules/schedule_160k.py'
]
crop_size = (512, 512)
model = dict(
    data_preprocessor=dict(size=crop_size),
    decode_head=dict(num_heads=6))
# as the published decoders: SGD lr 0.001, no weight decay, batch 8 = 8x1;
# class embeddings are never decayed
optimizer = dict(lr=0.001, weight_decay=0.0)
optim_wrapper = dict(
    type='OptimWrapper',
    optimizer=optimizer,
    paramwise_cfg=dict(custom_keys=dict(cls_emb=dict(decay_mult=0.0))))
train_dataloader = dict(batch_size=1)
val_dataloader = dict(batch_size=1)
