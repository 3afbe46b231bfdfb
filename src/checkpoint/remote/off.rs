//! A weir built without the `s3` feature: no object storage client. The
//! type has no values, so nothing can reach a storage call; opening says
//! which build has it.

use std::path::{Path, PathBuf};

use crate::checkpoint::storage::{Object, Storage, StorageError};
use crate::features::{missing_reason, Feature};

/// Object storage in a build that has none: never constructed.
#[derive(Debug, Clone)]
pub enum ObjectStorage {}

impl ObjectStorage {
    /// Refuses `url`: this build has no S3 client.
    pub fn open(url: &str, _options: &[(String, String)]) -> Result<ObjectStorage, String> {
        Err(format!("`{url}`: checkpoint storage on S3 {}", missing_reason(Feature::S3)))
    }
}

impl Storage for ObjectStorage {
    fn root(&self) -> String {
        match *self {}
    }
    fn put(&self, _: &str, _: &[u8]) -> Result<(), StorageError> {
        match *self {}
    }
    fn put_file(&self, _: &str, _: &Path) -> Result<(), StorageError> {
        match *self {}
    }
    fn put_many(&self, _: Vec<(String, PathBuf)>) -> Result<(), StorageError> {
        match *self {}
    }
    fn put_if_absent(&self, _: &str, _: &[u8]) -> Result<(), StorageError> {
        match *self {}
    }
    fn get(&self, _: &str) -> Result<Vec<u8>, StorageError> {
        match *self {}
    }
    fn get_to_file(&self, _: &str, _: &Path) -> Result<(), StorageError> {
        match *self {}
    }
    fn list(&self, _: &str) -> Result<Vec<Object>, StorageError> {
        match *self {}
    }
    fn delete(&self, _: &str) -> Result<(), StorageError> {
        match *self {}
    }
    fn get_versioned(&self, _: &str) -> Result<(Vec<u8>, String), StorageError> {
        match *self {}
    }
    fn put_conditional(&self, _: &str, _: &[u8], _: Option<&str>) -> Result<String, StorageError> {
        match *self {}
    }
}
