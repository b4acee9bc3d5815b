//! `shiitake/files-search` (seed: files-search supplies SearchVisibility to
//! Local and hosted Files adapters): the core's search visibility policy
//! ([`crate::files::visibility`], the one implementation) for a host's own
//! Files adapter. The shim (js/files-search.mjs) checks the input's types;
//! the bounds, the canonical paths and every answer are the core's.

use wasm_bindgen::prelude::*;

use crate::files::visibility::{IgnoreFile, Visibility, VisibilityError};
use crate::limits::FILE_PATH_BYTES_MAX;

/// One invocation's policy, built from the adapter's ignore files.
#[wasm_bindgen]
pub struct SearchVisibilityCore {
    policy: Visibility,
}

#[wasm_bindgen]
impl SearchVisibilityCore {
    /// `dirs[i]` holds the `.gitignore` whose text is `texts[i]`. Over a
    /// bound is a `RangeError`, a non-canonical or repeated directory a
    /// `TypeError`, each naming it.
    #[wasm_bindgen(constructor)]
    pub fn new(dirs: Vec<String>, texts: Vec<String>) -> Result<SearchVisibilityCore, JsValue> {
        let files = dirs
            .into_iter()
            .zip(texts)
            .map(|(dir, text)| IgnoreFile { dir, text })
            .collect();
        let policy = Visibility::new(files).map_err(|e| {
            let message = format!("searchVisibility: {e}");
            match e {
                VisibilityError::TooManyFiles { .. }
                | VisibilityError::FileTooLarge { .. }
                | VisibilityError::TooManyBytes { .. } => js_sys::RangeError::new(&message).into(),
                VisibilityError::NotCanonical(_) | VisibilityError::Duplicate(_) => {
                    js_sys::TypeError::new(&message).into()
                }
                VisibilityError::Compile { .. } | VisibilityError::Unavailable(_) => {
                    JsValue::from(js_sys::Error::new(&message))
                }
            }
        })?;
        Ok(SearchVisibilityCore { policy })
    }

    /// Whether a search or listing shows `path` (a directory when
    /// `is_dir`); a path that is not canonical and root-relative is a
    /// `TypeError` naming it, one over the bound a `RangeError`.
    pub fn visible(&self, path: &str, is_dir: bool) -> Result<bool, JsValue> {
        canonical(path)?;
        Ok(self.policy.is_visible(path, is_dir))
    }

    /// Why `path` is hidden (the `.git` component, or the excluded path and
    /// the pattern and file that exclude it), or `undefined` when shown.
    pub fn hidden(&self, path: &str, is_dir: bool) -> Result<Option<String>, JsValue> {
        canonical(path)?;
        Ok(self.policy.hidden(path, is_dir).map(|why| why.to_string()))
    }
}

/// `Ok` when `path` is canonical and root-relative (no empty, `.` or `..`
/// component: the policy answers for the paths the adapter lists, never
/// for another spelling of them) and at most [`FILE_PATH_BYTES_MAX`] bytes
/// (what one answer costs grows with the depth). Any other character is a
/// name's, as to git (a backslash, which the files module's own paths
/// refuse, among them).
fn canonical(path: &str) -> Result<(), JsValue> {
    if path.len() > FILE_PATH_BYTES_MAX {
        let message = format!(
            "searchVisibility: path `{}…` is {} bytes; at most {FILE_PATH_BYTES_MAX}",
            crate::text::prefix(path, 64),
            path.len()
        );
        return Err(js_sys::RangeError::new(&message).into());
    }
    if path.is_empty() || !path.split('/').any(|c| matches!(c, "" | "." | "..")) {
        return Ok(());
    }
    let message = format!(
        "searchVisibility: path `{}` is not canonical and root-relative (no empty, `.` or `..` component)",
        crate::text::shorten(path)
    );
    Err(js_sys::TypeError::new(&message).into())
}
