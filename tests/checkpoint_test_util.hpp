// Helpers for the checkpoint tests (tests/cpu and tests/mpi): global tensors
// whose every element has a closed-form value (so a loaded box is checked
// exactly without keeping the saved data), pieces with their own storage,
// and bands of a tensor's 2-D view.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "trainer/checkpoint/checkpoint.hpp"

namespace gt::test {

struct GlobalTensor {
  std::string name;
  std::vector<int64_t> shape;  // 1-D or 2-D
  int id = 0;                  // distinguishes the values of different tensors
};

// Exact in fp32 for id < 16 and rows, cols < 256 (a multiple of 1/4 below 2^17).
inline float value_at(int id, int64_t r, int64_t c) {
  return static_cast<float>(id) * 4096.f + static_cast<float>(r) * 16.f +
         static_cast<float>(c) * 0.25f;
}

// Band i of n along the rows (or columns) of t's 2-D view; uneven n is fine.
inline TensorBox row_band(const GlobalTensor& t, int i, int n) {
  const TensorBox w = whole_box(t.shape);
  return TensorBox{w.rows * i / n, w.rows * (i + 1) / n - w.rows * i / n, 0, w.cols};
}
inline TensorBox col_band(const GlobalTensor& t, int i, int n) {
  const TensorBox w = whole_box(t.shape);
  return TensorBox{0, w.rows, w.cols * i / n, w.cols * (i + 1) / n - w.cols * i / n};
}

// Pieces that own their data: filled with the closed-form values (to save)
// or with NaN (to load into; a NaN left over fails the exact check).
class PieceSet {
 public:
  void add_filled(const GlobalTensor& t, const TensorBox& b) { add(t, b, true); }
  void add_blank(const GlobalTensor& t, const TensorBox& b) { add(t, b, false); }

  // Views into the storage, valid until the next add.
  std::vector<TensorPiece> pieces() {
    std::vector<TensorPiece> out;
    for (size_t i = 0; i < tensors_.size(); ++i)
      out.push_back({tensors_[i].name, tensors_[i].shape, boxes_[i],
                     data_[i].empty() ? nullptr : data_[i].data()});
    return out;
  }

  // Every element of every piece equals its closed-form value.
  ::testing::AssertionResult all_exact() const {
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const TensorBox& b = boxes_[i];
      for (int64_t r = 0; r < b.rows; ++r)
        for (int64_t c = 0; c < b.cols; ++c) {
          const float got = data_[i][static_cast<size_t>(r * b.cols + c)];
          const float want = value_at(tensors_[i].id, b.row0 + r, b.col0 + c);
          if (!(got == want))
            return ::testing::AssertionFailure()
                   << tensors_[i].name << " element (" << b.row0 + r << ", " << b.col0 + c
                   << "): got " << got << ", expected " << want;
        }
    }
    return ::testing::AssertionSuccess();
  }

 private:
  void add(const GlobalTensor& t, const TensorBox& b, bool fill) {
    tensors_.push_back(t);
    boxes_.push_back(b);
    std::vector<float> d(static_cast<size_t>(std::max<int64_t>(b.rows, 0) *
                                             std::max<int64_t>(b.cols, 0)),
                         std::nanf(""));
    if (fill)
      for (int64_t r = 0; r < b.rows; ++r)
        for (int64_t c = 0; c < b.cols; ++c)
          d[static_cast<size_t>(r * b.cols + c)] = value_at(t.id, b.row0 + r, b.col0 + c);
    data_.push_back(std::move(d));
  }
  std::vector<GlobalTensor> tensors_;
  std::vector<TensorBox> boxes_;
  std::vector<std::vector<float>> data_;
};

}  // namespace gt::test
