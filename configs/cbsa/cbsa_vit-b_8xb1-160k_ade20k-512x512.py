_base_ = [
    '../_base_/models/cbsa_vit-b16.py', '../_base_/datasets/ade20k.py',
    '../_base_/default_runtime.py',
    '../_base_/schedules/schedule_160k.py'
]
crop_size = (512, 512)
# pad to the crop in training; upsample test images below the window
model = dict(
    data_preprocessor=dict(size=crop_size, test_short_side=crop_size[0]))
# 8 GPUs x 1 image = batch 8
train_dataloader = dict(batch_size=1)
