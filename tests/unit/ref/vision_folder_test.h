// The fixture the float-reference vision tests share: a random VLM folder written by the test
// (dir_), its vision config, one photograph through the model's preprocessing, and the
// checkpoint, read by HF tensor name. Header-only because tests/unit/ref builds one binary per
// *_test.cpp.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "qbc/frontend/safetensors.h"
#include "qbc/frontend/vision_config.h"
#include "qbc/image/image.h"
#include "qbc/image/preprocess.h"
#include "test_support.h"

namespace qbc::testing {

class VisionFolderTest : public ::testing::Test {
 protected:
  /// Reads dir_'s vision config and checkpoint, and `photo` through the preprocessor config
  /// `prep` (a failure is the test's).
  void open_folder(const std::filesystem::path& prep, const std::filesystem::path& photo) {
    auto vc = frontend::load_vision_config(dir_ / "config.json");
    QBC_ASSERT_OK(vc);
    ASSERT_TRUE(vc->has_value());
    vc_ = **vc;
    auto spec = image::load_preprocess_spec(prep.string());
    QBC_ASSERT_OK(spec);
    auto img = image::decode_file(photo.string());
    QBC_ASSERT_OK(img);
    auto px = image::preprocess(*img, *spec, photo.filename().string());
    QBC_ASSERT_OK(px);
    pixels_ = std::move(*px);
    auto ck = frontend::SafetensorsCheckpoint::open(dir_);
    QBC_ASSERT_OK(ck);
    ckpt_ = std::make_unique<frontend::SafetensorsCheckpoint>(std::move(*ck));
  }

  /// An HF tensor of the checkpoint as float32.
  std::vector<float> hf(const std::string& name) const {
    std::vector<float> v;
    const Status s = ckpt_->read_f32(name, &v);
    EXPECT_TRUE(s.ok()) << s.to_string();
    return v;
  }

  std::filesystem::path dir_;
  frontend::VisionConfig vc_;
  image::Pixels pixels_;
  std::unique_ptr<frontend::SafetensorsCheckpoint> ckpt_;
};

}  // namespace qbc::testing
