// qbc-bench-vision: a VLM's vision part, images per second on the executor (the compiled
// MXQ's vision part through runtime::VisionEncoder, as `qbc run --image` runs it: decode,
// preprocessing, the tower on the simulated device) against the float reference runtime
// (ref::Session over the same folder's vision graph, the same preprocessed inputs), both in
// this run, on this host (bench/vision.sh). The figures are host measurements, not NPU times.
// Towers: LLaVA's CLIP (patch rows and the embed_base constant), Gemma 3's SigLIP (patch rows
// without a CLS row, the checkpoint's position table, the projector weight read transposed; the
// executor's rows are divided by the file's feature divisor, so the float ones are too) and
// Qwen2.5-VL's (patch rows in window order and the grid's rope tables, at the compiled size the
// MXQ records; the float features are put back in the image's order, as the executor's are).
//
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "qbc/driver/vision_import.h"
#include "qbc/frontend/clip_vision.h"
#include "qbc/frontend/gemma3_vision.h"
#include "qbc/frontend/qwen_vision.h"
#include "qbc/frontend/safetensors.h"
#include "qbc/frontend/vision_config.h"
#include "qbc/image/image.h"
#include "qbc/image/preprocess.h"
#include "qbc/mxq/model_file.h"
#include "qbc/ref/session.h"
#include "qbc/runtime/model.h"
#include "qbc/runtime/vision_encoder.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

int fail(const qbc::Status& s) {
  std::fprintf(stderr, "qbc-bench-vision: %s\n", s.to_string().c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: qbc-bench-vision MODEL_DIR MODEL.mxq IMAGE [reps=3]\n");
    return 2;
  }
  const std::string dir = argv[1], mxq = argv[2], image_path = argv[3];
  const int reps = argc > 4 ? std::max(1, std::atoi(argv[4])) : 3;
  namespace q = qbc;

  // Executor: the file's vision part, as `qbc run --image` runs it.
  auto model = q::runtime::load_model(mxq);
  if (!model.ok()) return fail(model.status());
  auto enc = q::runtime::VisionEncoder::create(model->file, model->device->mode().scheme);
  if (!enc.ok()) return fail(enc.status());
  auto img = q::image::decode_file(image_path);
  if (!img.ok()) return fail(img.status());
  std::vector<float> npu_rows;
  double npu_best = 1e30;
  for (int r = 0; r < reps + 1; ++r) {  // the first call warms up
    const auto t0 = Clock::now();
    auto rows = (*enc)->encode(*img, image_path);
    if (!rows.ok()) return fail(rows.status());
    if (r > 0) npu_best = std::min(npu_best, seconds_since(t0));
    npu_rows = std::move(*rows);
  }

  // Float reference: the folder's vision graph over the same preprocessed inputs.
  auto vc = q::frontend::load_vision_config(dir + "/config.json");
  if (!vc.ok()) return fail(vc.status());
  if (!*vc) return fail(q::invalid_argument(dir, ": no vision_config"));
  const q::frontend::VisionConfig& v = **vc;
  const bool qwen = q::frontend::builds_qwen_vision_graph(v.tower);
  const bool gemma3 = q::frontend::builds_gemma3_vision_graph(v);
  const int64_t side = model->file.meta.vision().image_size();
  auto g = q::driver::import_vision_graph(dir, qwen ? side : 0);
  if (!g.ok()) return fail(g.status());
  if (!*g) return fail(q::invalid_argument(dir, ": no vision graph"));
  auto ck = q::frontend::SafetensorsCheckpoint::open(dir);
  if (!ck.ok()) return fail(ck.status());
  auto ckpt = std::make_shared<q::frontend::SafetensorsCheckpoint>(std::move(*ck));
  const q::frontend::TensorFloats read = [ckpt](const std::string& n, std::vector<float>* out) {
    return ckpt->read_f32(n, out);
  };
  const q::ir::WeightReader reader = [read, gemma3](const q::ir::Weight& w,
                                                    std::vector<float>* out) {
    return gemma3 ? q::frontend::gemma3_read_vision_weight(read, w, out) : read(w.tensor, out);
  };
  std::vector<float> base;  // CLIP's and Gemma 3's constant input
  q::frontend::QwenVisionLayout layout;
  if (qwen) {
    const int64_t grid = side / v.patch_size;
    auto l = q::frontend::qwen_vision_layout(v, {1, grid, grid});
    if (!l.ok()) return fail(l.status());
    layout = std::move(*l);
  } else if (gemma3) {
    const q::Status s = read((*g)->metadata["vision.embed_base"], &base);
    if (!s.ok()) return fail(s);
  } else {
    auto b = q::frontend::clip_embed_base(v, read);
    if (!b.ok()) return fail(b.status());
    base = std::move(*b);
  }
  auto spec = q::image::load_preprocess_spec(dir + "/preprocessor_config.json");
  if (!spec.ok()) return fail(spec.status());
  if (spec->flattens_patches()) spec->compiled_size = static_cast<int32_t>(side);
  auto session = q::ref::Session::create(**g, reader);
  if (!session.ok()) return fail(session.status());
  std::vector<float> float_rows;
  double float_best = 1e30;
  const int64_t group = v.merge * v.merge;
  for (int r = 0; r < reps + 1; ++r) {
    const auto t0 = Clock::now();
    auto px = q::image::preprocess(*img, *spec, image_path);
    if (!px.ok()) return fail(px.status());
    std::vector<std::vector<float>> inputs;
    if (qwen) {
      inputs = {q::frontend::qwen_window_rows(px->values, px->shape.back(), group,
                                              layout.window_index, false),
                layout.cos, layout.sin};
    } else if (gemma3) {
      inputs = {q::frontend::siglip_patch_rows(px->values, v.image_size, v.patch_size), base};
    } else {
      inputs = {q::frontend::clip_patch_rows(px->values, v.image_size, v.patch_size), base};
    }
    std::vector<float> out;
    const q::Status s = (*session)->forward_inputs(inputs, &out);
    if (!s.ok()) return fail(s);
    if (r > 0) float_best = std::min(float_best, seconds_since(t0));
    float_rows =
        qwen     ? q::frontend::qwen_window_rows(out, v.text_hidden, 1, layout.window_index, true)
        : gemma3 ? out
                 : q::frontend::clip_drop_cls(v, out, v.text_hidden);
  }
  if (const double d = model->file.meta.vision().feature_divisor(); d != 0.0 && d != 1.0) {
    for (float& x : float_rows) x = static_cast<float>(x / d);
  }

  // How close the quantized features are (SQNR of the executor's rows against the float ones).
  double sig = 0, err = 0;
  const size_t n = std::min(npu_rows.size(), float_rows.size());
  for (size_t i = 0; i < n; ++i) {
    sig += static_cast<double>(float_rows[i]) * float_rows[i];
    const double d = static_cast<double>(npu_rows[i]) - float_rows[i];
    err += d * d;
  }
  const double sqnr = err > 0 ? 10 * std::log10(sig / err) : 999.0;
  std::printf("vision_tower %s: %lld layers x %lld wide, %lldx%lld pixels, %lld rows per image\n",
              v.model_type.c_str(), static_cast<long long>(v.depth),
              static_cast<long long>(v.width), static_cast<long long>(side),
              static_cast<long long>(side),
              static_cast<long long>(npu_rows.size() / std::max<int64_t>(1, v.text_hidden)));
  std::printf("vision_executor_images_per_s %.4f (%.3f s per image, best of %d)\n", 1.0 / npu_best,
              npu_best, reps);
  std::printf("vision_float_images_per_s %.4f (%.3f s per image, best of %d)\n", 1.0 / float_best,
              float_best, reps);
  std::printf("vision_executor_vs_float %.3f (target >= 1)\n", float_best / npu_best);
  std::printf("vision_feature_sqnr_db %.2f (executor W8A8 rows vs float)\n", sqnr);
  return float_best / npu_best >= 1.0 ? 0 : 1;
}
