//! Dates as S3 speaks them: SigV4's `YYYYMMDDTHHMMSSZ` and HTTP's `Date` header (IMF-fixdate,
//! `Tue, 01 Dec 2026 23:40:12 GMT`), to and from Unix time, by the civil-calendar algorithms
//! (days from 1970-01-01 in the proleptic Gregorian calendar).

/// Days since 1970-01-01 of a civil date.
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let yoe = year - era * 400;
    let month = i64::from(month);
    let doy = (153 * (if month > 2 { month - 3 } else { month + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The civil date of a day count since 1970-01-01.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// SigV4's timestamp of a Unix time in seconds: `YYYYMMDDTHHMMSSZ`.
pub(crate) fn amz_date(unix_secs: u64) -> String {
    let secs = unix_secs as i64;
    let (year, month, day) = civil_from_days(secs.div_euclid(86_400));
    let of_day = secs.rem_euclid(86_400);
    format!(
        "{year:04}{month:02}{day:02}T{:02}{:02}{:02}Z",
        of_day / 3600,
        of_day / 60 % 60,
        of_day % 60
    )
}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// The Unix time in seconds of an HTTP date in IMF-fixdate form (what every S3 server sends);
/// None for anything else.
pub(crate) fn parse_http_date(text: &str) -> Option<u64> {
    // "Tue, 01 Dec 2026 23:40:12 GMT"
    let (_weekday, rest) = text.trim().split_once(", ")?;
    let mut parts = rest.split(' ');
    let day: u32 = parts.next()?.parse().ok()?;
    let month_name = parts.next()?;
    let month = MONTHS.iter().position(|m| *m == month_name)? as u32 + 1;
    let year: i64 = parts.next()?.parse().ok()?;
    let mut clock = parts.next()?.split(':');
    let (h, m, s): (i64, i64, i64) = (
        clock.next()?.parse().ok()?,
        clock.next()?.parse().ok()?,
        clock.next()?.parse().ok()?,
    );
    if parts.next()? != "GMT" || !(1..=31).contains(&day) || h > 23 || m > 59 || s > 60 {
        return None;
    }
    let secs = days_from_civil(year, month, day) * 86_400 + h * 3600 + m * 60 + s;
    u64::try_from(secs).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_dates_convert_both_ways() {
        // 2013-05-24T00:00:00Z, the date of AWS's signing examples.
        assert_eq!(amz_date(1_369_353_600), "20130524T000000Z");
        assert_eq!(amz_date(0), "19700101T000000Z");
        // A leap day and the end of a day.
        assert_eq!(amz_date(951_782_399), "20000228T235959Z");
        assert_eq!(amz_date(951_782_400), "20000229T000000Z");
        assert_eq!(
            parse_http_date("Fri, 24 May 2013 00:00:00 GMT"),
            Some(1_369_353_600)
        );
        assert_eq!(
            parse_http_date("Tue, 01 Dec 2026 23:40:12 GMT"),
            Some(1_796_168_412)
        );
        for secs in [0u64, 86_399, 951_782_400, 1_796_168_412, 4_102_444_800] {
            let amz = amz_date(secs);
            let (y, mo, d) = (&amz[0..4], &amz[4..6], &amz[6..8]);
            let (h, mi, s) = (&amz[9..11], &amz[11..13], &amz[13..15]);
            let month = MONTHS[mo.parse::<usize>().expect("month") - 1];
            let http = format!("Mon, {d} {month} {y} {h}:{mi}:{s} GMT");
            assert_eq!(parse_http_date(&http), Some(secs), "{http}");
        }
    }

    #[test]
    fn other_date_forms_are_refused() {
        for text in [
            "",
            "Tuesday, 01-Dec-26 23:40:12 GMT",
            "Tue Dec  1 23:40:12 2026",
            "Tue, 01 Foo 2026 23:40:12 GMT",
            "Tue, 01 Dec 2026 24:40:12 GMT",
            "Tue, 01 Dec 2026 23:40:12 PST",
        ] {
            assert_eq!(parse_http_date(text), None, "{text:?}");
        }
    }
}
