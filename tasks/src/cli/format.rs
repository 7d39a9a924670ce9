//! How the command line reads durations and prints times, durations and tables.

use std::time::Duration;

/// Parses `500ms`, `30s`, `5m`, `2h`, `1d`, sums of them (`1h30m`), or bare seconds (`30`).
pub(super) fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let invalid = || format!("invalid duration {text:?}: use e.g. 500ms, 30s, 5m, 1h30m");
    if text.is_empty() {
        return Err(invalid());
    }
    if let Ok(seconds) = text.parse::<u64>() {
        return Ok(Duration::from_secs(seconds));
    }
    let mut total = Duration::ZERO;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let number: u64 = rest[..digits].parse().map_err(|_| invalid())?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let millis_per_unit: u64 = match &rest[..unit_len] {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => return Err(invalid()),
        };
        rest = &rest[unit_len..];
        let millis = number.checked_mul(millis_per_unit).ok_or_else(invalid)?;
        total = total
            .checked_add(Duration::from_millis(millis))
            .ok_or_else(invalid)?;
    }
    Ok(total)
}

pub(super) use crate::display::{duration, maybe_time, time};

/// Left-aligned columns two spaces apart; the last column is not padded.
pub(super) fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut text = String::new();
    let header: Vec<String> = headers.iter().map(|h| (*h).to_owned()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let mut line = String::new();
        for (index, cell) in row.iter().enumerate() {
            if index + 1 == row.len() {
                line.push_str(cell);
            } else {
                let width = widths.get(index).copied().unwrap_or(0);
                let pad = width.saturating_sub(cell.chars().count());
                line.push_str(cell);
                line.push_str(&" ".repeat(pad + 2));
            }
        }
        text.push_str(line.trim_end());
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chrono::TimeDelta;

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("2d"), Ok(Duration::from_secs(172_800)));
        for bad in ["", "s", "10x", "1.5s", "-3s", "99999999999999999999d"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn durations_print() {
        assert_eq!(duration(TimeDelta::milliseconds(12)), "12ms");
        assert_eq!(duration(TimeDelta::milliseconds(1_250)), "1.25s");
        assert_eq!(duration(TimeDelta::seconds(184)), "3m04s");
        assert_eq!(duration(TimeDelta::minutes(123)), "2h03m");
    }

    #[test]
    fn tables_align() {
        let text = table(
            &["A", "BB"],
            &[
                vec!["long".into(), "x".into()],
                vec!["s".into(), "y".into()],
            ],
        );
        assert_eq!(text, "A     BB\nlong  x\ns     y\n");
    }
}
