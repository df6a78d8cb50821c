//! Small dense least squares for attribution: a row-major matrix, Householder QR with column pivoting (rank detection), and Lawson–Hanson non-negative least squares.
//!
//! The regression problems here are tiny (tens of intervals × a dozen features), so the
//! code favours clarity and numerical robustness (orthogonal factorizations, never normal
//! equations for solving) over speed.

// Index loops mirror the matrix algebra they implement.
#![allow(clippy::needless_range_loop)]

/// Row-major dense matrix.
#[derive(Debug, Clone, PartialEq)]
pub struct Mat {
    pub rows: usize,
    pub cols: usize,
    data: Vec<f64>,
}

impl Mat {
    pub fn zeros(rows: usize, cols: usize) -> Self {
        Mat {
            rows,
            cols,
            data: vec![0.0; rows * cols],
        }
    }

    /// Build from rows; all rows must have the same length.
    pub fn from_rows(rows: &[Vec<f64>]) -> Result<Self, NnlsError> {
        let cols = rows.first().map_or(0, Vec::len);
        if rows.iter().any(|r| r.len() != cols) {
            return Err(NnlsError::Shape("rows of unequal length".into()));
        }
        Ok(Mat {
            rows: rows.len(),
            cols,
            data: rows.iter().flatten().copied().collect(),
        })
    }

    #[inline]
    pub fn get(&self, r: usize, c: usize) -> f64 {
        self.data[r * self.cols + c]
    }

    #[inline]
    pub fn set(&mut self, r: usize, c: usize, v: f64) {
        self.data[r * self.cols + c] = v;
    }

    pub fn col(&self, c: usize) -> Vec<f64> {
        (0..self.rows).map(|r| self.get(r, c)).collect()
    }

    /// The sub-matrix of the given columns, in that order.
    pub fn select_cols(&self, cols: &[usize]) -> Mat {
        let mut m = Mat::zeros(self.rows, cols.len());
        for r in 0..self.rows {
            for (j, &c) in cols.iter().enumerate() {
                m.set(r, j, self.get(r, c));
            }
        }
        m
    }

    /// The sub-matrix without row `skip` (leave-one-out).
    pub fn without_row(&self, skip: usize) -> Mat {
        let mut data = Vec::with_capacity(self.data.len().saturating_sub(self.cols));
        for r in (0..self.rows).filter(|r| *r != skip) {
            data.extend_from_slice(&self.data[r * self.cols..(r + 1) * self.cols]);
        }
        Mat {
            rows: self.rows.saturating_sub(usize::from(skip < self.rows)),
            cols: self.cols,
            data,
        }
    }

    pub fn row(&self, r: usize) -> &[f64] {
        &self.data[r * self.cols..(r + 1) * self.cols]
    }

    /// A·x
    pub fn mul_vec(&self, x: &[f64]) -> Vec<f64> {
        (0..self.rows)
            .map(|r| self.row(r).iter().zip(x).map(|(a, b)| a * b).sum())
            .collect()
    }

    /// Aᵀ·y
    pub fn t_mul_vec(&self, y: &[f64]) -> Vec<f64> {
        let mut out = vec![0.0; self.cols];
        for (r, yr) in y.iter().enumerate().take(self.rows) {
            for (o, a) in out.iter_mut().zip(self.row(r)) {
                *o += a * yr;
            }
        }
        out
    }

    fn max_abs(&self) -> f64 {
        self.data.iter().fold(0.0f64, |m, v| m.max(v.abs()))
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum NnlsError {
    #[error("shape: {0}")]
    Shape(String),
    #[error("non-finite input")]
    NonFinite,
    #[error("NNLS did not converge in {0} iterations")]
    NoConvergence(usize),
}

/// Householder QR with column pivoting: A·P = Q·R.
#[derive(Debug, Clone)]
pub struct PivotedQr {
    /// Householder vectors (full length, zero above the diagonal).
    vs: Vec<Vec<f64>>,
    /// R (min(m,n) × n), columns in pivot order.
    r: Mat,
    /// `perm[k]` = original column at pivot position k.
    pub perm: Vec<usize>,
    /// Numerical rank.
    pub rank: usize,
    /// |R_kk| in pivot order.
    pub rdiag: Vec<f64>,
}

/// Factorize with column pivoting; columns whose remaining norm falls below
/// `rel_tol × |R_00|` are treated as linearly dependent on the earlier ones.
pub fn pivoted_qr(a: &Mat, rel_tol: f64) -> PivotedQr {
    let (m, n) = (a.rows, a.cols);
    let mut w = a.clone();
    let mut perm: Vec<usize> = (0..n).collect();
    let steps = m.min(n);
    let mut vs = Vec::with_capacity(steps);
    let mut rdiag = Vec::with_capacity(steps);
    for k in 0..steps {
        // Pivot: the column with the largest norm below row k (recomputed exactly: n is small,
        // and downdating norms loses accuracy exactly when rank decisions matter).
        let norm_below = |w: &Mat, c: usize| (k..m).map(|r| w.get(r, c).powi(2)).sum::<f64>();
        let (mut best, mut bn) = (k, -1.0);
        for c in k..n {
            let nc = norm_below(&w, c);
            if nc > bn {
                best = c;
                bn = nc;
            }
        }
        if best != k {
            for r in 0..m {
                let t = w.get(r, k);
                w.set(r, k, w.get(r, best));
                w.set(r, best, t);
            }
            perm.swap(k, best);
        }
        let alpha = bn.max(0.0).sqrt();
        let x0 = w.get(k, k);
        // Reflect x onto -sign(x0)·‖x‖·e1 to avoid cancellation.
        let diag = if x0 >= 0.0 { -alpha } else { alpha };
        let mut v = vec![0.0; m];
        for r in k..m {
            v[r] = w.get(r, k);
        }
        v[k] -= diag;
        let vnorm2: f64 = v[k..].iter().map(|x| x * x).sum();
        if vnorm2 > 0.0 {
            for c in k..n {
                let dot: f64 = (k..m).map(|r| v[r] * w.get(r, c)).sum();
                let f = 2.0 * dot / vnorm2;
                for r in k..m {
                    w.set(r, c, w.get(r, c) - f * v[r]);
                }
            }
        }
        rdiag.push(w.get(k, k).abs());
        vs.push(v);
    }
    let r00 = rdiag.first().copied().unwrap_or(0.0);
    let rank = if r00 > 0.0 {
        rdiag.iter().take_while(|d| **d > rel_tol * r00).count()
    } else {
        0
    };
    let mut r = Mat::zeros(steps, n);
    for i in 0..steps {
        for c in i..n {
            r.set(i, c, w.get(i, c));
        }
    }
    PivotedQr {
        vs,
        r,
        perm,
        rank,
        rdiag,
    }
}

impl PivotedQr {
    /// Qᵀ·b
    fn qt(&self, b: &[f64]) -> Vec<f64> {
        let mut y = b.to_vec();
        for (k, v) in self.vs.iter().enumerate() {
            let vn2: f64 = v[k..].iter().map(|x| x * x).sum();
            if vn2 == 0.0 {
                continue;
            }
            let dot: f64 = v[k..].iter().zip(&y[k..]).map(|(a, b)| a * b).sum();
            let f = 2.0 * dot / vn2;
            for (yi, vi) in y[k..].iter_mut().zip(&v[k..]) {
                *yi -= f * vi;
            }
        }
        y
    }

    /// Basic least-squares solution: dependent (beyond-rank) columns get 0.
    pub fn solve(&self, b: &[f64]) -> Vec<f64> {
        let y = self.qt(b);
        let r = self.rank;
        let mut z = vec![0.0; r];
        for i in (0..r).rev() {
            let s: f64 = (i + 1..r).map(|j| self.r.get(i, j) * z[j]).sum();
            z[i] = (y[i] - s) / self.r.get(i, i);
        }
        let mut x = vec![0.0; self.perm.len()];
        for (i, zi) in z.into_iter().enumerate() {
            x[self.perm[i]] = zi;
        }
        x
    }

    /// (AᵀA)⁻¹ restricted to the independent columns, in original column order
    /// (dependent columns get zero rows/columns): R⁻¹R⁻ᵀ permuted back.
    pub fn inv_gram(&self) -> Mat {
        let r = self.rank;
        let n = self.perm.len();
        // Rinv: upper triangular inverse of the leading r×r block.
        let mut rinv = Mat::zeros(r, r);
        for j in 0..r {
            rinv.set(j, j, 1.0 / self.r.get(j, j));
            for i in (0..j).rev() {
                let s: f64 = (i + 1..=j).map(|k| self.r.get(i, k) * rinv.get(k, j)).sum();
                rinv.set(i, j, -s / self.r.get(i, i));
            }
        }
        let mut out = Mat::zeros(n, n);
        for i in 0..r {
            for j in 0..r {
                let s: f64 = (i.max(j)..r).map(|k| rinv.get(i, k) * rinv.get(j, k)).sum();
                out.set(self.perm[i], self.perm[j], s);
            }
        }
        out
    }
}

/// Unconstrained least squares min ‖Ax − b‖ (basic solution if rank-deficient) and its rank.
pub fn lstsq(a: &Mat, b: &[f64], rel_tol: f64) -> (Vec<f64>, usize) {
    let qr = pivoted_qr(a, rel_tol);
    (qr.solve(b), qr.rank)
}

#[derive(Debug, Clone, PartialEq)]
pub struct NnlsSolution {
    pub x: Vec<f64>,
    /// ‖Ax − b‖₂
    pub residual_norm: f64,
    /// Outer iterations (columns freed).
    pub iterations: usize,
}

/// Rank tolerance for the passive-set subproblems (relative to the largest pivot).
const SUB_RANK_TOL: f64 = 1e-10;

/// Lawson–Hanson active-set NNLS: min ‖Ax − b‖₂ subject to x ≥ 0.
pub fn nnls(a: &Mat, b: &[f64]) -> Result<NnlsSolution, NnlsError> {
    let (m, n) = (a.rows, a.cols);
    if b.len() != m {
        return Err(NnlsError::Shape(format!(
            "A is {m}×{n} but b has {}",
            b.len()
        )));
    }
    if a.data.iter().chain(b).any(|v| !v.is_finite()) {
        return Err(NnlsError::NonFinite);
    }
    let mut x = vec![0.0; n];
    let mut passive = vec![false; n];
    if n == 0 || m == 0 {
        let rn = b.iter().map(|v| v * v).sum::<f64>().sqrt();
        return Ok(NnlsSolution {
            x,
            residual_norm: rn,
            iterations: 0,
        });
    }
    // Dual-feasibility tolerance as in Lawson–Hanson / SciPy: scale of A times machine eps.
    let tol = 10.0
        * f64::EPSILON
        * a.max_abs().max(f64::MIN_POSITIVE)
        * (m.max(n) as f64)
        * b.iter().fold(0.0f64, |s, v| s.max(v.abs())).max(1.0);
    let max_outer = 3 * n + 10;
    // Columns whose addition produced no positive coefficient (numerically dependent on the
    // passive set); excluded until x changes, otherwise the method would cycle on them.
    let mut blocked = vec![false; n];
    let mut iterations = 0;
    loop {
        let resid: Vec<f64> = a
            .mul_vec(&x)
            .iter()
            .zip(b)
            .map(|(ax, bi)| bi - ax)
            .collect();
        let w = a.t_mul_vec(&resid);
        let cand = (0..n)
            .filter(|&j| !passive[j] && !blocked[j] && w[j] > tol)
            .max_by(|&i, &j| w[i].total_cmp(&w[j]));
        let Some(t) = cand else { break };
        iterations += 1;
        if iterations > max_outer {
            return Err(NnlsError::NoConvergence(max_outer));
        }
        passive[t] = true;
        let mut inner = 0;
        loop {
            inner += 1;
            if inner > max_outer {
                return Err(NnlsError::NoConvergence(max_outer));
            }
            let pcols: Vec<usize> = (0..n).filter(|&j| passive[j]).collect();
            let (zp, _) = lstsq(&a.select_cols(&pcols), b, SUB_RANK_TOL);
            let mut z = vec![0.0; n];
            for (k, &j) in pcols.iter().enumerate() {
                z[j] = zp[k];
            }
            if pcols.iter().all(|&j| z[j] > 0.0) {
                x = z;
                blocked.iter_mut().for_each(|v| *v = false);
                break;
            }
            if z[t] <= 0.0 && x[t] == 0.0 {
                // In exact arithmetic the entering column always gets z_t > 0 (its gradient is
                // positive); z_t <= 0 means it is numerically dependent on the passive set.
                // Drop it and keep x (the least-squares solution of the old passive set).
                passive[t] = false;
                blocked[t] = true;
                break;
            }
            // Step from x towards z until the first passive coefficient hits zero; that one
            // (and any other that reached zero) leaves the passive set.
            let mut alpha = 1.0f64;
            let mut hit = None;
            for &j in &pcols {
                if z[j] <= 0.0 {
                    let d = x[j] - z[j];
                    let aj = if d > 0.0 { x[j] / d } else { 0.0 };
                    if aj < alpha || hit.is_none() {
                        alpha = aj.min(alpha);
                        hit = Some(j);
                    }
                }
            }
            for j in 0..n {
                x[j] += alpha * (z[j] - x[j]);
            }
            if let Some(h) = hit {
                x[h] = 0.0;
            }
            for &j in &pcols {
                if x[j] <= 0.0 {
                    passive[j] = false;
                    x[j] = 0.0;
                }
            }
            if !passive.iter().any(|p| *p) {
                break;
            }
        }
    }
    let resid: f64 = a
        .mul_vec(&x)
        .iter()
        .zip(b)
        .map(|(ax, bi)| (bi - ax).powi(2))
        .sum();
    Ok(NnlsSolution {
        x,
        residual_norm: resid.sqrt(),
        iterations,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: &[f64], b: &[f64], tol: f64) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() <= tol)
    }

    #[test]
    fn unconstrained_solution_when_positive() {
        // Overdetermined, consistent system with x = (1, 2, 3).
        let a = Mat::from_rows(&[
            vec![1.0, 0.0, 1.0],
            vec![0.0, 1.0, 1.0],
            vec![1.0, 1.0, 0.0],
            vec![2.0, 1.0, 1.0],
            vec![0.5, 0.0, 3.0],
        ])
        .unwrap();
        let x = [1.0, 2.0, 3.0];
        let b = a.mul_vec(&x);
        let s = nnls(&a, &b).unwrap();
        println!(
            "nnls consistent: {:?} residual {:.2e}",
            s.x, s.residual_norm
        );
        assert!(close(&s.x, &x, 1e-10));
        assert!(s.residual_norm < 1e-10);
    }

    #[test]
    fn active_constraint_known_solution() {
        // A = I(2), b = (1, -1): the unconstrained optimum (1, -1) violates x2 >= 0; NNLS is (1, 0).
        let a = Mat::from_rows(&[vec![1.0, 0.0], vec![0.0, 1.0]]).unwrap();
        let s = nnls(&a, &[1.0, -1.0]).unwrap();
        assert!(close(&s.x, &[1.0, 0.0], 1e-12));
        assert!((s.residual_norm - 1.0).abs() < 1e-12);

        // Coupled case: A = [[1,1],[1,2],[1,3]], b = (3, 2, 1). OLS gives slope -1 (<0), so the
        // constrained optimum puts x2 = 0 and x1 = mean(b) = 2 (checked by KKT below).
        let a = Mat::from_rows(&[vec![1.0, 1.0], vec![1.0, 2.0], vec![1.0, 3.0]]).unwrap();
        let b = [3.0, 2.0, 1.0];
        let s = nnls(&a, &b).unwrap();
        assert!(close(&s.x, &[2.0, 0.0], 1e-12), "{:?}", s.x);
        // KKT: gradient Aᵀ(b−Ax) is 0 on the free variable, ≤ 0 on the bound one.
        let r: Vec<f64> = a
            .mul_vec(&s.x)
            .iter()
            .zip(&b)
            .map(|(ax, bi)| bi - ax)
            .collect();
        let w = a.t_mul_vec(&r);
        assert!(w[0].abs() < 1e-10 && w[1] < 0.0);

        // Lawson & Hanson style: the first column enters, later leaves when the others explain b.
        let a = Mat::from_rows(&[
            vec![1.0, 1.0, 0.0],
            vec![1.0, 0.0, 1.0],
            vec![0.0, 1.0, 1.0],
            vec![1.0, 1.0, 1.0],
        ])
        .unwrap();
        let b = [0.0, 1.0, 3.0, 2.0];
        // Truth by enumerating all passive sets: the feasible one with the least residual.
        let best = enumerate_nnls(&a, &b);
        let s = nnls(&a, &b).unwrap();
        println!("nnls enumerated {:?} lawson-hanson {:?}", best, s.x);
        assert!(close(&s.x, &best, 1e-9));
        assert!(s.x.contains(&0.0), "a constraint is active");
    }

    /// Brute force over all 2^n passive sets (tiny n only).
    fn enumerate_nnls(a: &Mat, b: &[f64]) -> Vec<f64> {
        let n = a.cols;
        let mut best = (f64::INFINITY, vec![0.0; n]);
        for mask in 0u32..(1 << n) {
            let cols: Vec<usize> = (0..n).filter(|j| mask & (1 << j) != 0).collect();
            let (z, _) = lstsq(&a.select_cols(&cols), b, 1e-12);
            if z.iter().any(|v| *v < 0.0) {
                continue;
            }
            let mut x = vec![0.0; n];
            for (k, &j) in cols.iter().enumerate() {
                x[j] = z[k];
            }
            let r: f64 = a
                .mul_vec(&x)
                .iter()
                .zip(b)
                .map(|(p, q)| (p - q).powi(2))
                .sum();
            if r < best.0 - 1e-12 {
                best = (r, x);
            }
        }
        best.1
    }

    #[test]
    fn random_problems_match_enumeration() {
        let mut s = 0x1234_5678_9abc_def1u64;
        let mut rnd = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 11) as f64 / (1u64 << 53) as f64 - 0.5
        };
        for _ in 0..200 {
            let (m, n) = (8, 5);
            let rows: Vec<Vec<f64>> = (0..m).map(|_| (0..n).map(|_| rnd()).collect()).collect();
            let a = Mat::from_rows(&rows).unwrap();
            let b: Vec<f64> = (0..m).map(|_| rnd()).collect();
            let want = enumerate_nnls(&a, &b);
            let got = nnls(&a, &b).unwrap();
            assert!(close(&got.x, &want, 1e-8), "{:?} vs {:?}", got.x, want);
        }
    }

    #[test]
    fn rank_deficient_columns() {
        // Column 2 duplicates column 0: rank 2; NNLS still returns a minimal-residual solution.
        let a = Mat::from_rows(&[
            vec![1.0, 0.0, 1.0],
            vec![0.0, 1.0, 0.0],
            vec![1.0, 1.0, 1.0],
            vec![2.0, 0.0, 2.0],
        ])
        .unwrap();
        let qr = pivoted_qr(&a, 1e-10);
        assert_eq!(qr.rank, 2);
        let b = a.mul_vec(&[1.0, 1.0, 1.0]);
        let s = nnls(&a, &b).unwrap();
        assert!(s.residual_norm < 1e-9);
        assert!((s.x[0] + s.x[2] - 2.0).abs() < 1e-9 && (s.x[1] - 1.0).abs() < 1e-9);
        assert!(matches!(nnls(&a, &[1.0]), Err(NnlsError::Shape(_))));
        assert!(matches!(
            nnls(&a, &[f64::NAN, 0.0, 0.0, 0.0]),
            Err(NnlsError::NonFinite)
        ));
    }

    #[test]
    fn inverse_gram_matches_direct() {
        let a = Mat::from_rows(&[vec![2.0, 1.0], vec![1.0, 3.0], vec![0.0, 1.0]]).unwrap();
        // AᵀA = [[5,5],[5,11]]; inverse = [[11,-5],[-5,5]]/30.
        let g = pivoted_qr(&a, 1e-12).inv_gram();
        assert!(close(
            &[g.get(0, 0), g.get(0, 1), g.get(1, 0), g.get(1, 1)],
            &[11.0 / 30.0, -5.0 / 30.0, -5.0 / 30.0, 5.0 / 30.0],
            1e-12
        ));
    }
}
