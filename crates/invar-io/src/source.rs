//! [`FrameSource`]: utterances of frames (`frames × D` [`Matrix`]es) loaded on demand, the one
//! interface between where frames live (a feature set on disk, a decoder, memory) and what
//! consumes them (EM, MAP, i-vector statistics).

use std::borrow::Cow;

use crate::Matrix;

/// A boxed error from a frame source (a feature set on disk, a decoder, ...); consumers wrap it
/// with the index of the utterance that failed.
pub type SourceError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Utterances of frames (`frames × D` matrices), loaded on demand so that a corpus larger than
/// memory can be streamed; `Sync` because consumers run over utterances in parallel.
pub trait FrameSource: Sync {
    /// Number of utterances.
    fn len(&self) -> usize;
    /// The frames of utterance `index` (`0..len()`).
    fn frames(&self, index: usize) -> std::result::Result<Cow<'_, Matrix>, SourceError>;
    /// Whether there are no utterances.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl FrameSource for &[Matrix] {
    fn len(&self) -> usize {
        <[Matrix]>::len(self)
    }
    fn frames(&self, index: usize) -> std::result::Result<Cow<'_, Matrix>, SourceError> {
        self.get(index)
            .map(Cow::Borrowed)
            .ok_or_else(|| format!("no utterance {index}").into())
    }
}

impl FrameSource for Vec<Matrix> {
    fn len(&self) -> usize {
        <[Matrix]>::len(self)
    }
    fn frames(&self, index: usize) -> std::result::Result<Cow<'_, Matrix>, SourceError> {
        self.get(index)
            .map(Cow::Borrowed)
            .ok_or_else(|| format!("no utterance {index}").into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_memory_sources_borrow_and_refuse_past_the_end() {
        let utts = vec![Matrix::zeros(2, 3), Matrix::zeros(4, 3)];
        let slice: &[Matrix] = &utts;
        for source in [&slice as &dyn FrameSource, &utts as &dyn FrameSource] {
            assert_eq!(source.len(), 2);
            assert!(!source.is_empty());
            let second = source.frames(1).expect("in range");
            assert!(matches!(second, Cow::Borrowed(_)));
            assert_eq!((second.rows, second.cols), (4, 3));
            let err = source.frames(2).expect_err("past the end");
            assert_eq!(err.to_string(), "no utterance 2");
        }
        assert!(Vec::<Matrix>::new().is_empty());
    }
}
