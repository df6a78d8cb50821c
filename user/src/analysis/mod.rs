//! From a recording to what ddioscope concludes: its summary, what it says about the host
//! and each queue in the model's terms (observation), the attribution evidence, the advice,
//! and the answer every report leads with, so `report`, `recommend`, `simulate` and the HTML
//! report agree.
pub mod advice;
pub mod answer;
pub mod charts;
pub mod diff;
pub mod evidence;
pub mod filter;
pub mod geometry;
pub mod observation;
pub mod summary;
pub mod verdict;

pub use advice::{advise, advise_or_explain, Advice, Outcome};
pub use answer::{answer, Answer, QueueVerdict, VerdictKind};
pub use evidence::{attribution, evidence, other_stacks_bytes, AttributionReport};
pub use geometry::{geometry, GeometryOverrides};
pub use observation::observation;
pub use summary::Summary;

// The model's and the recording's vocabulary the renderers print, named here so that no
// renderer reaches past this layer.
pub use crate::model::geometry::LlcGeometry;
pub use crate::model::spec::{GridPoint, Input, SimSpec, Source as InputSource};
pub use crate::recording::meta::StoppedBy;
pub use charts::{charts, Charts};
