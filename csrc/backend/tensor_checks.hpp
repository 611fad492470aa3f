#pragma once
// Validation of user input, done on the calling thread before anything is
// sent. Each failure raises the Python exception a user would expect
// (ValueError, TypeError, NotImplementedError) with a message that says what
// was expected, what was given, and what to allocate instead.

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <optional>
#include <string>
#include <vector>

#include "collectives/datatype.hpp"

namespace ucxcoll {

// The element type for reductions; nullopt for dtypes we cannot reduce.
std::optional<DataType> toDataType(at::ScalarType type);

// Exactly one CPU tensor (CUDA: not supported yet).
void checkSingleTensor(const char* op, const std::vector<at::Tensor>& tensors, const char* role);
void checkCpu(const char* op, const at::Tensor& tensor, const char* role);

// all_gather (list form): one output per rank, each shaped and typed like
// the input.
void checkAllgatherOutputs(const char* op, const std::vector<at::Tensor>& outputs, const at::Tensor& input,
                           int worldSize);

// all_gather_into_tensor: output holds worldSize inputs (concatenated or
// stacked), same dtype.
void checkAllgatherIntoTensor(const char* op, const at::Tensor& output, const at::Tensor& input, int worldSize);

void checkRoot(const char* op, int64_t root, int worldSize);

// A point-to-point peer: a rank of the group ("destination" or "source").
void checkPeer(const char* op, int64_t peer, int worldSize, const char* role);
// A point-to-point tag: non-negative (and within what a tag can carry).
void checkTag(const char* op, int64_t tag);

// The element type of a tensor to reduce, or TypeError.
DataType reducibleType(const char* op, const at::Tensor& tensor);
// torch's reduce op as a Reduction: NotImplementedError for the ones not
// supported yet, TypeError for one not defined on `type` (e.g. MAX of
// complex numbers, BAND of floats).
Reduction toReduction(const char* op, const c10d::ReduceOp& reduceOp, DataType type);
// PREMUL_SUM's factor (a number or a one-element tensor); 1 for other ops.
double premulFactor(const char* op, const c10d::ReduceOp& reduceOp);
const char* reduceOpName(const c10d::ReduceOp& op);

std::string shapeText(const at::Tensor& tensor);

}  // namespace ucxcoll
