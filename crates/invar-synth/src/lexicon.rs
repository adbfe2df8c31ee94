//! The lexicon (English words transcribed in the inventory's phones) and the sentence pool.

use rand::seq::SliceRandom;
use rand::Rng;

use crate::phones::phone_index;

/// The built-in lexicon: spelling and TIMIT-style transcription. 90 words over all 34 phones.
pub static LEXICON: &[(&str, &str)] = &[
    ("the", "dh ah"),
    ("a", "ah"),
    ("see", "s iy"),
    ("me", "m iy"),
    ("we", "w iy"),
    ("he", "hh iy"),
    ("she", "sh iy"),
    ("they", "dh ey"),
    ("day", "d ey"),
    ("way", "w ey"),
    ("say", "s ey"),
    ("make", "m ey k"),
    ("take", "t ey k"),
    ("came", "k ey m"),
    ("name", "n ey m"),
    ("rain", "r ey n"),
    ("time", "t ay m"),
    ("light", "l ay t"),
    ("night", "n ay t"),
    ("right", "r ay t"),
    ("five", "f ay v"),
    ("nine", "n ay n"),
    ("my", "m ay"),
    ("go", "g ow"),
    ("no", "n ow"),
    ("home", "hh ow m"),
    ("road", "r ow d"),
    ("boat", "b ow t"),
    ("show", "sh ow"),
    ("low", "l ow"),
    ("cat", "k ae t"),
    ("bad", "b ae d"),
    ("man", "m ae n"),
    ("hand", "hh ae n d"),
    ("back", "b ae k"),
    ("bed", "b eh d"),
    ("red", "r eh d"),
    ("ten", "t eh n"),
    ("well", "w eh l"),
    ("sit", "s ih t"),
    ("big", "b ih g"),
    ("fish", "f ih sh"),
    ("thing", "th ih ng"),
    ("king", "k ih ng"),
    ("sing", "s ih ng"),
    ("dog", "d ao g"),
    ("long", "l ao ng"),
    ("talk", "t ao k"),
    ("walk", "w ao k"),
    ("saw", "s ao"),
    ("hot", "hh aa t"),
    ("not", "n aa t"),
    ("top", "t aa p"),
    ("father", "f aa dh er"),
    ("water", "w ao t er"),
    ("cup", "k ah p"),
    ("sun", "s ah n"),
    ("love", "l ah v"),
    ("good", "g uh d"),
    ("book", "b uh k"),
    ("look", "l uh k"),
    ("food", "f uw d"),
    ("moon", "m uw n"),
    ("blue", "b l uw"),
    ("two", "t uw"),
    ("shoe", "sh uw"),
    ("bird", "b er d"),
    ("work", "w er k"),
    ("her", "hh er"),
    ("yes", "y eh s"),
    ("you", "y uw"),
    ("with", "w ih th"),
    ("is", "ih z"),
    ("has", "hh ae z"),
    ("was", "w ah z"),
    ("green", "g r iy n"),
    ("deep", "d iy p"),
    ("keep", "k iy p"),
    ("sleep", "s l iy p"),
    ("river", "r ih v er"),
    ("seven", "s eh v ah n"),
    ("open", "ow p ah n"),
    ("paper", "p ey p er"),
    ("monkey", "m ah ng k iy"),
    ("garden", "g aa r d ah n"),
    ("yellow", "y eh l ow"),
    ("window", "w ih n d ow"),
    ("silver", "s ih l v er"),
    ("north", "n ao r th"),
    ("happy", "hh ae p iy"),
];

/// A word of the lexicon: its spelling and its phones as [`crate::phones::INVENTORY`] indices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Word {
    /// Spelling, lower case.
    pub spelling: &'static str,
    /// Phones, as indices into the inventory.
    pub phones: Vec<usize>,
}

/// The lexicon resolved against the inventory.
///
/// Words whose transcription uses a phone missing from the inventory are skipped (none are in
/// the built-in list; a unit test checks it).
pub fn lexicon() -> Vec<Word> {
    LEXICON
        .iter()
        .filter_map(|(spelling, pron)| {
            let phones: Option<Vec<usize>> = pron.split_whitespace().map(phone_index).collect();
            phones.map(|phones| Word { spelling, phones })
        })
        .collect()
}

/// A sentence of the pool: word indices into [`lexicon`] and the TIMIT-style sentence name.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Sentence {
    /// `SA1`, `SA2` for the sentences every speaker reads, `SX<n>` for the shared pool.
    pub name: String,
    /// Word indices into [`lexicon`].
    pub words: Vec<usize>,
}

/// Draws the sentence pool: `shared` sentences everyone reads, then `pool` sentences that
/// speakers draw from. Word choice follows a Zipf-like law (rank r has weight 1/(r+2)) over a
/// seeded permutation of the lexicon, so frequent words recur across sentences and speakers.
pub fn sentence_pool<R: Rng>(
    rng: &mut R,
    n_words: usize,
    shared: usize,
    pool: usize,
    words_min: usize,
    words_max: usize,
) -> Vec<Sentence> {
    let mut order: Vec<usize> = (0..n_words).collect();
    order.shuffle(rng);
    let weights: Vec<f64> = (0..n_words).map(|r| 1.0 / (r as f64 + 2.0)).collect();
    let total: f64 = weights.iter().sum();
    let draw_word = |rng: &mut R| {
        let mut u = rng.random::<f64>() * total;
        for (rank, w) in weights.iter().enumerate() {
            if u < *w {
                return order[rank];
            }
            u -= w;
        }
        order[n_words - 1]
    };
    (0..shared + pool)
        .map(|i| {
            let len = rng.random_range(words_min..=words_max);
            let mut words: Vec<usize> = Vec::with_capacity(len);
            while words.len() < len {
                let w = draw_word(rng);
                if words.last() != Some(&w) {
                    words.push(w);
                }
            }
            let name = if i < shared {
                format!("SA{}", i + 1)
            } else {
                format!("SX{}", 100 + i - shared)
            };
            Sentence { name, words }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::phones::INVENTORY;
    use rand::SeedableRng;

    #[test]
    fn every_word_resolves_and_every_phone_is_used() {
        let lex = lexicon();
        assert_eq!(
            lex.len(),
            LEXICON.len(),
            "a transcription uses an unknown phone"
        );
        assert!(lex.len() >= 50);
        for (i, p) in INVENTORY.iter().enumerate() {
            if !p.is_silence() {
                assert!(
                    lex.iter().any(|w| w.phones.contains(&i)),
                    "phone {} unused",
                    p.symbol
                );
            }
        }
        let mut spellings: Vec<_> = lex.iter().map(|w| w.spelling).collect();
        spellings.sort_unstable();
        spellings.dedup();
        assert_eq!(spellings.len(), lex.len(), "duplicate spelling");
    }

    #[test]
    fn pool_has_names_lengths_and_recurring_words() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let n = lexicon().len();
        let pool = sentence_pool(&mut rng, n, 2, 20, 3, 6);
        assert_eq!(pool.len(), 22);
        assert_eq!(pool[0].name, "SA1");
        assert_eq!(pool[1].name, "SA2");
        assert_eq!(pool[2].name, "SX100");
        let mut counts = vec![0usize; n];
        for s in &pool {
            assert!((3..=6).contains(&s.words.len()));
            for w in &s.words {
                counts[*w] += 1;
            }
        }
        let recurring = counts.iter().filter(|&&c| c >= 2).count();
        assert!(recurring >= 10, "only {recurring} words recur");
    }
}
