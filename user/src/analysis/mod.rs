//! From a recording to what ddioscope concludes: its summary, what it says about the host
//! and each queue in the model's terms (observation), the attribution evidence, the advice,
//! and the answer every report leads with, so `report`, `recommend`, `simulate` and the HTML
//! report agree.
pub mod advice;
pub mod answer;
pub mod evidence;
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
