//! Model-prior attribution: the simulator's per-queue / per-flow predicted misses, scaled to the measured socket total when there is one; the only method on hosts without counters ("model-only").

use super::{
    flow_share, merge, sort_flows, Attribution, Confidence, Method, ModelPrediction, QueueId,
    QueueShare,
};
use crate::model::SimResult;

impl ModelPrediction {
    /// Predictions from a simulator run of the recorded workload: misses of every kind the
    /// socket counters see (DDIO write, I/O read, core read), queue i = RX queue i. Flows are
    /// left for the caller, who knows their 5-tuples.
    pub fn from_sim(r: &SimResult, measured_total: Option<f64>) -> Self {
        let queues = r
            .per_queue
            .iter()
            .enumerate()
            .map(|(i, h)| {
                (
                    QueueId::rx(i as u32),
                    (h.io_write_misses + h.io_read_misses + h.cpu_read_misses) as f64,
                )
            })
            .collect();
        ModelPrediction {
            queues,
            flows: Vec::new(),
            measured_total,
        }
    }
}

pub fn model_prior(p: &ModelPrediction) -> Attribution {
    let m = Method::ModelPrior;
    let bad = |v: &f64| !(v.is_finite() && *v >= 0.0);
    if p.queues.iter().any(|(_, v)| bad(v)) || p.flows.iter().any(|(_, v)| bad(v)) {
        return Attribution::insufficient(m, "model prediction has negative or non-finite misses");
    }
    let queues = merge(&p.queues);
    let pred: f64 = queues.iter().map(|(_, v)| v).sum();
    if pred <= 0.0 {
        return Attribution::insufficient(m, "the model predicts no misses on packet buffers");
    }
    let (scale, notes) = match p.measured_total {
        Some(t) if t.is_finite() && t > 0.0 => (
            t / pred,
            vec![
                format!("model-only: simulator prediction scaled to the measured socket total of {t:.3e} misses; model {pred:.3e}"),
                "the measured total includes misses outside packet buffers, so scaled per-queue misses are an upper bound".into(),
            ],
        ),
        Some(_) => (1.0, vec!["model-only: measured socket total is zero or invalid; unscaled simulator prediction".to_string()]),
        None => (1.0, vec!["model-only: no miss counters on this host; misses are the simulator's prediction, not a measurement".to_string()]),
    };
    let qs = queues
        .iter()
        .map(|(q, v)| QueueShare {
            dir: q.dir.clone(),
            queue: q.queue,
            misses: v * scale,
            share_pct: 100.0 * v / pred,
            ci_pct: None,
        })
        .collect();
    let mut flows: Vec<_> = merge(&p.flows)
        .iter()
        .map(|(f, v)| flow_share(f, v * scale, pred * scale))
        .collect();
    sort_flows(&mut flows);
    Attribution {
        method: m,
        confidence: Confidence::Low,
        queues: qs,
        flows,
        notes,
        counts_are_samples: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scales_to_measured_total() {
        let p = ModelPrediction {
            queues: vec![(QueueId::rx(0), 30.0), (QueueId::rx(1), 10.0)],
            flows: Vec::new(),
            measured_total: Some(4000.0),
        };
        let a = model_prior(&p);
        assert_eq!(
            (a.method, a.confidence),
            (Method::ModelPrior, Confidence::Low)
        );
        assert_eq!((a.queues[0].misses, a.queues[0].share_pct), (3000.0, 75.0));
        assert!(a.notes[0].starts_with("model-only"));
        let a = model_prior(&ModelPrediction {
            measured_total: None,
            ..p.clone()
        });
        assert_eq!(a.queues[1].misses, 10.0);
        assert!(a.notes[0].contains("no miss counters"));
        // Nothing measured: no note about what a measured total includes.
        assert!(
            !a.notes.iter().any(|n| n.contains("measured total")),
            "{:?}",
            a.notes
        );
        let z = ModelPrediction {
            queues: vec![(QueueId::rx(0), 0.0)],
            ..Default::default()
        };
        assert_eq!(model_prior(&z).confidence, Confidence::Insufficient);
        let bad = ModelPrediction {
            queues: vec![(QueueId::rx(0), f64::NAN)],
            ..Default::default()
        };
        assert_eq!(model_prior(&bad).confidence, Confidence::Insufficient);
    }
}
