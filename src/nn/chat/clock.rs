//! `strftime_now(format)` of transformers' templates: the clock as a civil
//! date (UTC) and C's `strftime` in the C locale.

/// Now, as (year, month 1-12, day, hour, minute, second, weekday 0 = Monday, day of year 1-366), UTC.
pub(super) type Civil = (i64, u32, u32, u32, u32, u32, u32, u32);

pub(super) fn now_utc() -> Civil {
    civil(unix_seconds())
}

#[cfg(not(target_arch = "wasm32"))]
fn unix_seconds() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// The page's clock: `SystemTime::now` panics on wasm32-unknown-unknown.
#[cfg(target_arch = "wasm32")]
fn unix_seconds() -> i64 {
    (js_sys::Date::now() / 1000.0) as i64
}

/// `secs` since 1970 as a civil date and time (UTC).
fn civil(secs: i64) -> Civil {
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400) as u32);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    const BEFORE: [u32; 12] = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
    let yday = BEFORE[month as usize - 1] + day + u32::from(leap && month > 2);
    let weekday = (days + 3).rem_euclid(7) as u32; // 1970-01-01 was a Thursday
    (
        year,
        month,
        day,
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        weekday,
        yday,
    )
}

/// C's `strftime` in the C locale for the directives dates use; others are
/// written as they are.
pub(super) fn strftime(format: &str, (y, mo, d, h, mi, s, wd, yd): Civil) -> String {
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    const DAYS: [&str; 7] = [
        "Monday",
        "Tuesday",
        "Wednesday",
        "Thursday",
        "Friday",
        "Saturday",
        "Sunday",
    ];
    let (month, day) = (MONTHS[mo as usize - 1], DAYS[wd as usize]);
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let Some(spec) = chars.next() else {
            out.push('%');
            break;
        };
        let text = match spec {
            'Y' => y.to_string(),
            'y' => format!("{:02}", y.rem_euclid(100)),
            'm' => format!("{mo:02}"),
            'd' => format!("{d:02}"),
            'e' => format!("{d:2}"),
            'B' => month.into(),
            'b' | 'h' => month[..3].into(),
            'A' => day.into(),
            'a' => day[..3].into(),
            'H' => format!("{h:02}"),
            'I' => format!("{:02}", (h + 11) % 12 + 1),
            'p' => (if h < 12 { "AM" } else { "PM" }).into(),
            'M' => format!("{mi:02}"),
            'S' => format!("{s:02}"),
            'j' => format!("{yd:03}"),
            'u' => (wd + 1).to_string(),
            'w' => ((wd + 1) % 7).to_string(),
            'F' => format!("{y}-{mo:02}-{d:02}"),
            'T' => format!("{h:02}:{mi:02}:{s:02}"),
            'D' => format!("{mo:02}/{d:02}/{:02}", y.rem_euclid(100)),
            'Z' => "UTC".into(),
            'z' => "+0000".into(),
            '%' => "%".into(),
            other => format!("%{other}"),
        };
        out.push_str(&text);
    }
    out
}
