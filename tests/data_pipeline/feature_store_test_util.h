// Damaging a feature store on purpose: overwrite bytes in the middle of a dataset's first stored
// chunk (located with HDF5's chunk query), as a flipped disk block would. Only for *_hdf5.cpp tests.
#pragma once

#include <gtest/gtest.h>
#include <hdf5/serial/hdf5.h>

#include <fstream>
#include <string>

namespace foldcore::data {

inline void corrupt_chunk(const std::string& path, const std::string& dataset) {
  haddr_t addr = 0;
  hsize_t size = 0;
  {
    const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    const hid_t ds = H5Dopen2(f, dataset.c_str(), H5P_DEFAULT);
    const hid_t space = H5Dget_space(ds);
    hsize_t offset[4];
    unsigned mask = 0;
    EXPECT_GE(H5Dget_chunk_info(ds, space, 0, offset, &mask, &addr, &size), 0) << dataset;
    H5Sclose(space);
    H5Dclose(ds);
    H5Fclose(f);
  }
  ASSERT_GT(size, 16u) << dataset;
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(addr + size / 2));
  const char junk[8] = {'\x13', '\x37', '\x00', '\x7f', '\x55', '\x2a', '\x01', '\x02'};
  f.write(junk, sizeof junk);
}

}  // namespace foldcore::data
