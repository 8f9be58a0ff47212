//! KubeletConfiguration.
