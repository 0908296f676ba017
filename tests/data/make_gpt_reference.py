#!/usr/bin/python3
"""Megatron-core's GPT sample indexing in numpy, as the reference for test_gpt_dataset.

An independent transcription of Megatron-LM's megatron/core/datasets code (not of Lattice's
C++), on a small synthetic dataset whose token at position p of sequence s is s * 1000 + p:

  gpt_dataset.py   GPTDataset._build_document_sample_shuffle_indices, _get_num_epochs,
                   _build_document_index, _build_shuffle_index,
                   _query_document_sample_shuffle_indices (the tokens of a sample)
  helpers.cpp      build_sample_idx, build_blending_indices
  blended_megatron_dataset_config.py
                   parse_and_normalize_split, convert_split_vector_to_split_matrix
  blended_megatron_dataset_builder.py
                   _build_megatron_dataset_splits (split bounds: int(round(b * n))),
                   _get_size_per_split_per_dataset (per-dataset sample counts)
  utils.py         normalize (numpy float64: w / sum(w))

Regenerate with Debian's numpy (python3-numpy):

    /usr/bin/python3 tests/data/make_gpt_reference.py > tests/data/gpt_reference.json
"""
import functools
import json
import math
import re
import sys

import numpy

# 50 sequences; one empty, one of a single token, the rest 2..29 tokens.
SEQUENCE_LENGTHS = [(i * 37 + 11) % 29 + 1 for i in range(50)]
SEQUENCE_LENGTHS[17] = 0
SEQUENCE_LENGTHS[31] = 1
ADD_EXTRA_TOKEN = 1
THRESHOLD = 0.80  # GPTDataset: separate the final epoch below 80 % of an epoch's samples


def token(sequence, position):
    return sequence * 1000 + position


# ---- gpt_dataset.py -------------------------------------------------------------------
def get_num_epochs(num_tokens_per_epoch, num_samples, sequence_length):
    num_epochs = 1
    num_tokens = num_tokens_per_epoch
    num_tokens_requested = num_samples * sequence_length + ADD_EXTRA_TOKEN
    while num_tokens < num_tokens_requested:
        num_epochs += 1
        num_tokens += num_tokens_per_epoch
    return num_epochs


def build_document_index(documents, num_epochs, random_state, separate_final_epoch):
    if not separate_final_epoch or num_epochs == 1:
        document_index = numpy.mgrid[0:num_epochs, 0:len(documents)][1]
        document_index[:] = documents
        document_index = document_index.reshape(-1).astype(numpy.int32)
        random_state.shuffle(document_index)
        return document_index
    first = build_document_index(documents, num_epochs - 1, random_state, False)
    last = build_document_index(documents, 1, random_state, False)
    return numpy.concatenate((first, last))


def build_shuffle_index(num_samples, total_size, random_state):
    dtype = numpy.uint32
    if total_size >= (numpy.iinfo(numpy.uint32).max - 1):
        dtype = numpy.int64
    first = numpy.arange(start=0, stop=num_samples, step=1, dtype=dtype)
    random_state.shuffle(first)
    if num_samples == total_size:
        return first
    last = numpy.arange(start=num_samples, stop=total_size, step=1, dtype=dtype)
    random_state.shuffle(last)
    return numpy.concatenate((first, last))


# ---- helpers.cpp build_sample_idx (drop_last_partial_sequence = true) ------------------
def build_sample_idx(sizes, document_idx, seq_length, num_epochs, tokens_per_epoch):
    num_samples = (num_epochs * tokens_per_epoch - ADD_EXTRA_TOKEN) // seq_length
    sample_idx = numpy.zeros((num_samples + 1, 2), dtype=numpy.int64)
    sample_idx_index = 0
    document_idx_index = 0
    doc_offset = 0
    sample_idx[sample_idx_index] = (document_idx_index, doc_offset)
    sample_idx_index += 1
    while sample_idx_index <= num_samples:
        remaining_seq_length = seq_length + ADD_EXTRA_TOKEN
        while remaining_seq_length != 0:
            document_index = document_idx[document_idx_index]
            document_length = int(sizes[document_index]) - doc_offset
            remaining_seq_length -= document_length
            if remaining_seq_length <= 0:
                doc_offset += remaining_seq_length + document_length - ADD_EXTRA_TOKEN
                remaining_seq_length = 0
            else:
                if document_idx_index == len(document_idx) - 1:
                    assert sample_idx_index == num_samples
                    doc_offset = int(sizes[document_idx[document_idx_index]]) - ADD_EXTRA_TOKEN
                    break
                document_idx_index += 1
                doc_offset = 0
        sample_idx[sample_idx_index] = (document_idx_index, doc_offset)
        sample_idx_index += 1
    return sample_idx


def build_gpt_indices(sizes, documents, num_samples, sequence_length, seed):
    num_tokens_per_epoch = int(numpy.sum(numpy.asarray(sizes, dtype=numpy.int32)[documents]))
    num_epochs = get_num_epochs(num_tokens_per_epoch, num_samples, sequence_length)
    num_samples_sans_final_epoch = None
    if num_epochs == 1:
        separate_final_epoch = False
    else:
        num_samples_sans_final_epoch = (
            (num_epochs - 1) * num_tokens_per_epoch - ADD_EXTRA_TOKEN) // sequence_length
        num_samples_from_final_epoch = num_samples - num_samples_sans_final_epoch
        num_samples_per_epoch = (num_tokens_per_epoch - ADD_EXTRA_TOKEN) // sequence_length
        assert 0 <= num_samples_from_final_epoch <= num_samples_per_epoch + 1
        separate_final_epoch = num_samples_from_final_epoch < int(
            THRESHOLD * num_samples_per_epoch)
    random_state = numpy.random.RandomState(seed)
    document_index = build_document_index(documents, num_epochs, random_state,
                                          separate_final_epoch)
    sample_index = build_sample_idx(sizes, document_index, sequence_length, num_epochs,
                                    num_tokens_per_epoch)
    total = sample_index.shape[0] - 1
    if separate_final_epoch:
        shuffle_index = build_shuffle_index(num_samples_sans_final_epoch, total, random_state)
    else:
        shuffle_index = build_shuffle_index(total, total, random_state)
    return {
        "num_epochs": num_epochs,
        "separate_final_epoch": separate_final_epoch,
        "document_index": document_index,
        "sample_index": sample_index,
        "shuffle_index": shuffle_index,
    }


def sample_tokens(sizes, indices, idx, sequence_length):
    """GPTDataset._query_document_sample_shuffle_indices on the synthetic tokens."""
    document_index = indices["document_index"]
    sample_index = indices["sample_index"]
    idx = indices["shuffle_index"][idx]
    beg, beg_offset = sample_index[idx]
    end, end_offset = sample_index[idx + 1]
    parts = []
    for i in range(beg, end + 1):
        sequence = int(document_index[i])
        offset = beg_offset if i == beg else 0
        stop = end_offset + ADD_EXTRA_TOKEN if i == end else sizes[sequence]
        parts.extend(token(sequence, p) for p in range(offset, stop))
    assert len(parts) == sequence_length + ADD_EXTRA_TOKEN
    return parts


# ---- helpers.cpp build_blending_indices -------------------------------------------------
def build_blending_indices(weights, size):
    dataset_index = []
    dataset_sample_index = []
    current_samples = [0] * len(weights)
    for sample_idx in range(size):
        sample_idx_double = max(float(sample_idx), 1.0)
        max_error_index = 0
        max_error = weights[0] * sample_idx_double - float(current_samples[0])
        for dataset_idx in range(1, len(weights)):
            error = weights[dataset_idx] * sample_idx_double - float(current_samples[dataset_idx])
            if error > max_error:
                max_error = error
                max_error_index = dataset_idx
        dataset_index.append(max_error_index)
        dataset_sample_index.append(current_samples[max_error_index])
        current_samples[max_error_index] += 1
    return dataset_index, dataset_sample_index


def normalize(weights):
    w = numpy.array(weights, dtype=numpy.float64)
    return (w / numpy.sum(w)).tolist()


def size_per_dataset(normalized_weights, target_size, surplus):
    return [int(math.ceil(math.ceil(target_size * w) * (1 + surplus)))
            for w in normalized_weights]


# ---- --split ----------------------------------------------------------------------------
def split_bounds(split, num_elements):
    vector = list(map(float, re.findall(r"[.0-9]+", split)))
    vector = vector + [0.0 for _ in range(3 - len(vector))]
    vector = normalize(vector)
    expansion = functools.reduce(lambda a, b: a + [a[len(a) - 1] + b], [[0], *vector])
    matrix = []
    for beg, end in zip(expansion[:-1], expansion[1:]):
        matrix.append(None if end <= beg else (beg, end))
    bounds = []
    for bookend in matrix:
        if bookend is None:
            bounds.append(None)
        else:
            bounds.append([int(round(bookend[0] * float(num_elements))),
                           int(round(bookend[1] * float(num_elements)))])
    return bounds


def main():
    gpt_cases = []
    for name, beg, end, num_samples, seq, seed in [
        ("all_200", 0, 50, 200, 16, 1234),      # several epochs, separate final epoch
        ("mid_105", 5, 45, 105, 16, 1234),      # several epochs, final epoch shuffled in
        ("one_epoch", 10, 50, 20, 16, 1234),    # one epoch
        ("seed_7", 0, 50, 200, 16, 7),
    ]:
        documents = numpy.arange(beg, end, dtype=numpy.int32)
        indices = build_gpt_indices(SEQUENCE_LENGTHS, documents, num_samples, seq, seed)
        gpt_cases.append({
            "name": name,
            "doc_begin": beg,
            "doc_end": end,
            "num_samples": num_samples,
            "seq_length": seq,
            "seed": seed,
            "num_epochs": indices["num_epochs"],
            "separate_final_epoch": indices["separate_final_epoch"],
            "document_index": [int(v) for v in indices["document_index"]],
            "sample_index": [int(v) for v in indices["sample_index"].reshape(-1)],
            "shuffle_index": [int(v) for v in indices["shuffle_index"]],
            "first_samples": [sample_tokens(SEQUENCE_LENGTHS, indices, i, seq)
                              for i in range(20)],
        })
    assert {c["separate_final_epoch"] for c in gpt_cases if c["num_epochs"] > 1} == {
        True, False}, "the reference must cover both final-epoch branches"

    raw_weights = [3.0, 5.0, 2.0]
    builder_weights = normalize(raw_weights)           # BlendedMegatronDatasetBuilder
    blended_weights = normalize(builder_weights)       # BlendedDataset normalises again
    blend_size = 1000
    dataset_index, dataset_sample_index = build_blending_indices(blended_weights, blend_size)
    blend = {
        "raw_weights": raw_weights,
        "size": blend_size,
        "target_sizes": size_per_dataset(builder_weights, blend_size, 0.0),
        "buffer_sizes": size_per_dataset(builder_weights, blend_size, 0.005),
        "dataset_index": dataset_index,
        "dataset_sample_index": dataset_sample_index,
    }

    splits = []
    for split in ["969,30,1", "100,0,0", "1,1,1", "98,2", "1", "0,1,0", "949,50,1",
                  "2.5,2.5,5"]:
        for n in [3, 50, 1000, 12345, 1 << 20]:
            splits.append({"split": split, "n": n, "bounds": split_bounds(split, n)})

    json.dump({
        "generator": "tests/data/make_gpt_reference.py",
        "numpy_version": numpy.__version__,
        "sequence_lengths": SEQUENCE_LENGTHS,
        "token_rule": "sequence * 1000 + position",
        "gpt": gpt_cases,
        "blend": blend,
        "splits": splits,
    }, sys.stdout, separators=(",", ":"))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
