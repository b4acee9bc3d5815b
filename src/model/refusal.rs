//! Why the model layer refuses an address, a choice, an image or a tool
//! call's arguments. Each message is the one callers show (and tests
//! assert); callers add their own context in front.

use super::IMAGE_MEDIA_TYPES;
use crate::limits::{
    MODELS_OFFERED_MAX, MODEL_ADDRESS_BYTES_MAX, TOOL_RESULT_IMAGES_MAX,
    TOOL_RESULT_IMAGE_BYTES_MAX,
};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The level, shortened.
    #[error("reasoning `{0}`: expected one of minimal, low, medium, high, max")]
    UnknownReasoning(String),
    #[error("model `{0}`: expected provider/model, e.g. openai/gpt-4o-mini")]
    NoProvider(String),
    #[error("model `{spelling}`: unknown provider `{provider}`; expected openai or anthropic")]
    UnknownProvider { spelling: String, provider: String },
    #[error("model `{0}`: the model name is empty")]
    EmptyModel(String),
    /// The address's length in bytes.
    #[error("model address: at most {MODEL_ADDRESS_BYTES_MAX} bytes, got {0}")]
    AddressTooLong(usize),
    /// The address, shortened.
    #[error("model `{0}`: no spaces and no control characters")]
    AddressSpaces(String),
    #[error("at most {MODELS_OFFERED_MAX} offered models, got more")]
    TooManyOffered,
    #[error("`{0}` is not offered by this host")]
    NotOffered(String),
    #[error("`{address}`: provider {provider} is not signed in (no key or base URL configured)")]
    NotSignedIn {
        address: String,
        provider: &'static str,
    },
    #[error("`{address}`: the owner's key sources exclude provider {provider}")]
    KeyExcluded {
        address: String,
        provider: &'static str,
    },
    /// No layer and no offered address resolves: the whole bounded
    /// diagnostic, `model:unavailable: ...`.
    #[error("{0}")]
    Unavailable(String),
    /// `at` names the image (`images[0]`).
    #[error("{at}.mediaType: must be one of {}", IMAGE_MEDIA_TYPES.join(", "))]
    ImageType { at: String },
    #[error("{at}.data: must be non-empty standard base64")]
    ImageData { at: String },
    #[error("images: at most {TOOL_RESULT_IMAGES_MAX} per tool result, got {0}")]
    TooManyImages(usize),
    #[error(
        "images: at most {TOOL_RESULT_IMAGE_BYTES_MAX} bytes of base64 per tool result, got {0}"
    )]
    ImageBytes(usize),
    #[error("tool call `{id}` (`{name}`): arguments are not a JSON object: {why}")]
    BadArguments {
        id: String,
        name: String,
        why: String,
    },
}

/// The host's callers still carry errors as text (`src/host/fleet.rs`,
/// `src/host/models.rs`): a refusal reaches them as its message.
impl From<Refusal> for String {
    fn from(refusal: Refusal) -> String {
        refusal.to_string()
    }
}
